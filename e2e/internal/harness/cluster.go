// Package cluster connects end-to-end tests to the single-node Kubernetes
// that e2e/cluster/up.sh starts (`make e2e` runs it, the tests and
// e2e/cluster/down.sh). The harness describes the cluster in FERRY_E2E_*
// environment variables and runs `go test` inside the node's network
// namespace, where 127.0.0.1 is the node's loopback: the API server, NodePorts
// and the plain-HTTP registries containerd pulls from all answer there.
//
// Get skips a test when no cluster is described (FERRY_E2E_KUBECONFIG unset)
// and fails it instead under FERRY_E2E=1, so a harness that lost the cluster
// never passes by skipping.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The environment variables the harness (e2e/cluster/up.sh) sets.
const (
	// EnvRequire set to 1 turns a missing cluster into a test failure.
	EnvRequire = "FERRY_E2E"
	// EnvKubeconfig is the path of an admin kubeconfig.
	EnvKubeconfig = "FERRY_E2E_KUBECONFIG"
	// EnvContainerd is the node's containerd socket.
	EnvContainerd = "FERRY_E2E_CONTAINERD"
	// EnvImage is the name of the tiny image imported into the node.
	EnvImage = "FERRY_E2E_IMAGE"
	// EnvTiny is the path of the tiny binary (e2e/internal/tiny).
	EnvTiny = "FERRY_E2E_TINY"
	// EnvRegistryPorts lists, comma-separated, the loopback ports containerd
	// pulls from over plain HTTP that tests may listen on.
	EnvRegistryPorts = "FERRY_E2E_REGISTRY_PORTS"
)

// Defaults used when the harness leaves a variable unset.
const (
	// DefaultImage is the tiny image up.sh imports (also the sandbox image).
	DefaultImage = "ferry.local/tiny:e2e"
	// DefaultContainerd is a containerd socket when EnvContainerd is unset.
	DefaultContainerd = "/run/containerd/containerd.sock"
)

// DefaultRegistryPorts are the ports up.sh lets containerd pull from over
// plain HTTP (besides 31999, kept for ferry's in-cluster registry).
var DefaultRegistryPorts = []int{5000, 5001, 5002, 5003, 5004, 5005, 5006, 5007, 5008, 5009}

// DefaultTimeout bounds the waits of this package when ctx has no deadline.
const DefaultTimeout = 2 * time.Minute

// Cluster is the running e2e cluster.
type Cluster struct {
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Config is the REST configuration built from Kubeconfig.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Containerd is the node's containerd socket.
	Containerd string
	// Image is the tiny image present on the node; pods use it with
	// imagePullPolicy Never.
	Image string
	// RegistryPorts are loopback ports containerd pulls from over plain HTTP.
	RegistryPorts []int

	tiny string
}

// Get returns the cluster the harness describes. Without EnvKubeconfig it
// skips t, or fails it when EnvRequire is 1.
func Get(t testing.TB) *Cluster {
	t.Helper()
	path := os.Getenv(EnvKubeconfig)
	if path == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but %s is not set: run the e2e tests with `make e2e`", EnvRequire, EnvKubeconfig)
		}
		t.Skipf("%s not set: `make e2e` runs this test against a real cluster", EnvKubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	cfg.Timeout = 30 * time.Second
	// As ferry's commands (cmd/ferry clientConfig) and kubectl: client-go's
	// default of 5 requests a second made init here wait on its own client
	// (the injector's 24 ConfigMaps and a few lists took 6.5 s).
	cfg.QPS, cfg.Burst = 50, 300
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	c := &Cluster{
		Kubeconfig:    path,
		Config:        cfg,
		Client:        client,
		Containerd:    envOr(EnvContainerd, DefaultContainerd),
		Image:         envOr(EnvImage, DefaultImage),
		RegistryPorts: DefaultRegistryPorts,
		tiny:          os.Getenv(EnvTiny),
	}
	if v := os.Getenv(EnvRegistryPorts); v != "" {
		c.RegistryPorts = nil
		for _, s := range strings.Split(v, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || p <= 0 || p > 65535 {
				t.Fatalf("%s=%q: %q is not a port", EnvRegistryPorts, v, s)
			}
			c.RegistryPorts = append(c.RegistryPorts, p)
		}
	}
	return c
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// NamespacePrefix begins the name of every namespace a test makes for
// itself (Namespace), deleted when it ends without waiting for its Pods.
const NamespacePrefix = "ferry-e2e-"

// Namespace creates a namespace for t (named ferry-e2e-<random>), waits until
// its default service account exists (pods are refused before), and deletes
// it when t ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: NamespacePrefix},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	err = poll(ctx, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("namespace %s: service account default: %v", ns.Name, err)
	}
	return ns.Name
}

// Tiny returns the tiny program (e2e/internal/tiny, static, linux) to put in
// images: the file EnvTiny names, else one built with `go build` for t.
func (c *Cluster) Tiny(t testing.TB) []byte {
	t.Helper()
	path := c.tiny
	if path == "" {
		path = filepath.Join(t.TempDir(), "tiny")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", path, "github.com/ferrypkg/ferry/e2e/internal/tiny")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build tiny: %v: %s", err, oneLine(string(out)))
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("tiny: %v", err)
	}
	return b
}

// ImportImage loads an image archive (OCI layout or docker save tar, e.g.
// from mkimg.Image.WriteArchive) into the node's containerd, where pods with
// imagePullPolicy Never find it under the name the archive gives it.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	cmd := exec.CommandContext(ctx, "ctr", "--address", c.Containerd, "--namespace", "k8s.io", "images", "import", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", archive, err, oneLine(string(out)))
	}
	return nil
}

// WaitNodeReady waits until node name reports Ready, for at most
// DefaultTimeout when ctx has no deadline.
func WaitNodeReady(ctx context.Context, client kubernetes.Interface, name string) (*corev1.Node, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var node *corev1.Node
	err := poll(ctx, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return nodeReady(n), nil
	})
	if err != nil {
		state := "not found"
		if node != nil {
			state = nodeState(node)
		}
		return node, fmt.Errorf("node %s not Ready: %w: %s", name, err, state)
	}
	return node, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeState(n *corev1.Node) string {
	var s []string
	for _, c := range n.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Message))
	}
	return strings.Join(s, ", ")
}

// poll calls cond every 250 ms (pollEvery) until it is done, fails, or
// ctx ends.
func poll(ctx context.Context, cond func(context.Context) (bool, error)) error {
	return pollEvery(ctx, 250*time.Millisecond, cond)
}

func pollEvery(ctx context.Context, every time.Duration, cond func(context.Context) (bool, error)) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		done, err := cond(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return timeoutError(ctx)
		case <-tick.C:
		}
	}
}

// PollUntil calls cond every half second until it is true or d passes; an
// error cond returns is why it is not true yet (an API server that does not
// answer for a moment is waited out too), and the last one is in the error
// PollUntil returns when d passes. It stops when ctx ends.
func PollUntil(ctx context.Context, d time.Duration, cond func() (bool, error)) error {
	within, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	err := pollEvery(within, 500*time.Millisecond, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil && ctx.Err() == nil { // d passed
		if last == nil {
			last = errors.New("timed out")
		}
		return fmt.Errorf("after %s: %w", d, last)
	}
	return err
}

// withDefaultTimeout gives ctx DefaultTimeout when it has no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, DefaultTimeout, fmt.Errorf("timed out after %s", DefaultTimeout))
}

func timeoutError(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		return fmt.Errorf("timed out (deadline %s)", dl.Format(time.TimeOnly))
	}
	return ctx.Err()
}

// oneLine folds s to one line for an error message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Multi-node: the variables nodes.sh and exec.sh --workstation set.
const (
	// EnvWorkstation is 1 when the tests run in the workstation namespace,
	// which reaches the API server and nothing else.
	EnvWorkstation = "FERRY_E2E_WORKSTATION"
	// EnvNodes lists the nodes, space-separated (node1 node2 …).
	EnvNodes = "FERRY_E2E_NODES"
	// EnvState is the harness' state folder.
	EnvState = "FERRY_E2E_STATE"
)

// Workstation returns the cluster as the workstation sees it, or skips t
// when the tests do not run there (the first phase of `make e2e`, on
// node1): the multi-node tests run in the second phase.
func Workstation(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv(EnvWorkstation) != "1" {
		t.Skipf("%s not set: `make e2e` runs this test from the workstation namespace of a multi-node cluster", EnvWorkstation)
	}
	return Get(t)
}

// Nodes are the cluster's nodes by name, as the harness made them.
func (c *Cluster) Nodes() []string { return strings.Fields(os.Getenv(EnvNodes)) }

// Script runs one of the harness' scripts (e2e/cluster/NAME) with args, and
// returns its combined output.
func Script(ctx context.Context, name string, args ...string) (string, error) {
	_, file, _, _ := runtimeCaller()
	p := filepath.Join(filepath.Dir(file), "..", "..", "cluster", name)
	out, err := exec.CommandContext(ctx, "bash", append([]string{p}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, oneLine(string(out)))
	}
	return string(out), nil
}
