package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	godigest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// via is what ferry's -o json says about the way to the registry.
type via struct {
	Host     string  `json:"host"`
	Via      string  `json:"via"`
	Pod      string  `json:"pod"`
	Protocol string  `json:"protocol"`
	Seconds  float64 `json:"seconds"`
	Dials    int     `json:"dials"`
}

// ferryJSON runs the ferry CLI with args and -o json against the cluster's
// kubeconfig and decodes its output into v.
func ferryJSON(ctx context.Context, t *testing.T, c *harness.Cluster, v any, args ...string) error {
	t.Helper()
	args = append(args, "--kubeconfig", c.Kubeconfig, "-o", "json")
	start := time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), args...).Output()
	t.Logf("ferry %s: %.1fs", args[0], time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("ferry %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(exitStderr(err)))
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("ferry %s printed %q: %w", args[0], out, err)
	}
	return nil
}

// TestMultiNode runs ferry from the workstation namespace, which reaches
// the API server and nothing else, against a cluster of several nodes
// (each with its own loopback, containerd and kubelet): init, deploy and
// remove go through a tunnel; a Deployment with one replica per node pulls
// 127.0.0.1:31999/…@sha256 on each node, rewritten by the agent; `ferry
// registry connect` serves crane and oras; and when the registry's node
// goes down, deploy says so and init moves the registry.
func TestMultiNode(t *testing.T) {
	c := harness.Workstation(t)
	ctx := timeout(t, 15*time.Minute)
	nodes := readyNodes(ctx, t, c)

	// The workstation reaches no NodePort: not on its loopback, not on a node.
	for _, addr := range []string{"127.0.0.1:31999", "10.200.0.1:31999", "10.200.0.2:31999", "10.200.0.2:10250", "1.1.1.1:443", "10.96.0.1:443"} {
		if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			conn.Close()
			t.Fatalf("the workstation reaches %s", addr)
		}
	}

	// Zero egress, the cluster's side: its namespaces have no way out.
	clusterIsolated(ctx, t)

	// Zero egress: from here on, every connection the workstation tries
	// to anything but the API server and its own loopback is counted by
	// its firewall, and must not happen (checked at the end).
	if out, err := exec.CommandContext(ctx, "iptables", "-w", "-Z", "OUTPUT").CombinedOutput(); err != nil {
		t.Fatalf("iptables -Z: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if n, rules := rejected(t); n != 0 {
			t.Errorf("ferry tried %d connections beyond the API server and loopback: %s", n, rules)
		} else {
			t.Logf("zero egress: init, deploy, package verify, package mirror, list, registry connect (with crane and oras), remove: no connection beyond the API server and loopback")
		}
	})
	resetFerry(ctx, t, c)
	var pkg string
	var pubName string
	var digest string

	ok := t.Run("init through the tunnel", func(t *testing.T) {
		var res struct {
			Registry    string `json:"registry"`
			Node        string `json:"node"`
			Injected    bool   `json:"injected"`
			Agent       string `json:"agent"`
			RegistryVia via    `json:"registryVia"`
			Seconds     float64
			Steps       []struct {
				Name    string  `json:"name"`
				Seconds float64 `json:"seconds"`
			} `json:"steps"`
		}
		if err := ferryJSON(ctx, t, c, &res, "init", "--bin-dir", binDir(t)); err != nil {
			t.Fatal(err)
		}
		if res.RegistryVia.Via != "tunnel" || !res.Injected || res.Agent == "" {
			t.Fatalf("init: %+v", res)
		}
		// Where the time went, as -o json reports it: every step ran.
		var steps []string
		names := map[string]bool{}
		for _, s := range res.Steps {
			steps = append(steps, fmt.Sprintf("%s %.1fs", s.Name, s.Seconds))
			names[s.Name] = true
		}
		for _, want := range []string{"injector", "registry", "hand-over", "registry via", "registry image", "agent"} {
			if !names[want] {
				t.Errorf("init -o json: no step %q among %v", want, steps)
			}
		}
		t.Logf("TIMING init from the workstation: %.1fs [budget 12 s]; registry on %s; tunnel %s over %s ready in %.3fs; steps: %s",
			res.Seconds, res.Node, res.RegistryVia.Pod, res.RegistryVia.Protocol, res.RegistryVia.Seconds, strings.Join(steps, ", "))
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("deploy through the tunnel", func(t *testing.T) {
		p, pub := appPackage(ctx, t, c, "e2e-mn")
		// The package outlives this subtest: copy it and the key.
		pkg, pubName = keep(t, p), keep(t, pub.Name)
		var rec struct {
			Root        string `json:"root"`
			BytesPushed int64  `json:"bytesPushed"`
			RegistryVia via    `json:"registryVia"`
		}
		if err := ferryJSON(ctx, t, c, &rec, "deploy", pkg, "--key", pubName); err != nil {
			t.Fatal(err)
		}
		if rec.RegistryVia.Via != "tunnel" || rec.RegistryVia.Protocol != kube.ProtocolProxy || rec.BytesPushed == 0 {
			t.Fatalf("deploy: %+v", rec)
		}
		t.Logf("deployed %s: %d bytes pushed through %s (%s), tunnel ready in %.3fs", rec.Root, rec.BytesPushed, rec.RegistryVia.Host, rec.RegistryVia.Pod, rec.RegistryVia.Seconds)
		if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "package", "verify", pkg, "--key", pubName).CombinedOutput(); err != nil {
			t.Fatalf("package verify: %v: %s", err, out)
		}
		var mirrored struct {
			Root        string `json:"root"`
			RegistryVia via    `json:"registryVia"`
		}
		if err := ferryJSON(ctx, t, c, &mirrored, "package", "mirror", pkg, "--in-cluster"); err != nil {
			t.Fatal(err)
		}
		if mirrored.RegistryVia.Via != "tunnel" || mirrored.Root != rec.Root {
			t.Fatalf("package mirror --in-cluster: %+v", mirrored)
		}
		var list []struct {
			Name string `json:"name"`
		}
		if err := ferryJSON(ctx, t, c, &list, "list"); err != nil || len(list) != 1 || list[0].Name != "e2e-mn" {
			t.Fatalf("list: %+v, %v", list, err)
		}
	})
	if !ok {
		t.FailNow()
	}
	digest = appDigest(ctx, t, pkg)

	ok = t.Run("a push resumes after the registry Pod restarts", func(t *testing.T) {
		pushResumes(ctx, t, c)
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("one replica per node pulls by digest on its own node", func(t *testing.T) {
		ns := c.Namespace(t)
		spreadAcross(ctx, t, c, ns, "spread", nodes, "127.0.0.1:31999/library/app@"+digest)
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("registry connect serves crane and oras", func(t *testing.T) {
		connectAndPull(ctx, t, c, digest)
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("RBAC without port-forward: one line naming the fix", func(t *testing.T) {
		kc := limitedKubeconfig(ctx, t, c)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", pkg, "--key", pubName, "--kubeconfig", kc).CombinedOutput()
		msg := strings.TrimSpace(string(out))
		if err == nil {
			t.Fatalf("deploy without port-forward rights succeeded: %s", out)
		}
		t.Logf("deploy without port-forward rights: %s", msg)
		for _, s := range []string{"not allowed to port-forward", "pods/portforward", "--registry-via nodeport"} {
			if !strings.Contains(msg, s) {
				t.Errorf("the error does not say %q", s)
			}
		}
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("remove through the tunnel", func(t *testing.T) {
		var res struct {
			Images      []string `json:"images"`
			RegistryVia via      `json:"registryVia"`
		}
		// remove garbage-collects in read-only maintenance mode: the
		// registry Pod serves throughout, without a restart.
		if err := ferryJSON(ctx, t, c, &res, "remove", "e2e-mn"); err != nil {
			t.Fatal(err)
		}
		if res.RegistryVia.Via != "tunnel" || len(res.Images) != 1 {
			t.Fatalf("remove: %+v", res)
		}
		t.Logf("removed %v; the tunnel dialled %d times", res.Images, res.RegistryVia.Dials)
	})
	if !ok {
		t.FailNow()
	}

	t.Run("the registry's node goes down: deploy says so, init moves it", func(t *testing.T) {
		registryNodeDown(ctx, t, c, pkg, pubName, digest, nodes)
	})
}

// readyNodes waits until every node of the harness is Ready and returns
// their names (at least two: the multi-node tests need them).
func readyNodes(ctx context.Context, t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	nodes := c.Nodes()
	if len(nodes) < 2 {
		t.Fatalf("%d nodes (%v): the harness joins workers with nodes.sh add", len(nodes), nodes)
	}
	for _, n := range nodes {
		if _, err := harness.WaitNodeReady(ctx, c.Client, n); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// keep copies a file into a folder that lives as long as the test binary's
// temporary folder, for use after the subtest that made it.
func keep(t *testing.T, p string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-e2e-mn-")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(p))
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// appDigest is the digest package pkg records for docker.io/library/app:1.0.
func appDigest(ctx context.Context, t *testing.T, pkg string) string {
	t.Helper()
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return r.Config().Components[0].Images[0].Digest.String()
}

// spreadAcross runs a Deployment of docker.io/library/app:1.0 with one
// replica on each node (required anti-affinity), and checks that the agent
// rewrote every Pod to want and that each pulled it on its own node.
func spreadAcross(ctx context.Context, t *testing.T, c *harness.Cluster, ns, name string, nodes []string, want string) {
	t.Helper()
	sel := map[string]string{"app": name}
	pod := tinyPod(name, "docker.io/library/app:1.0", corev1.PullIfNotPresent)
	pod.Labels = sel
	pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: corev1.LabelHostname,
		}},
	}}
	n := int32(len(nodes))
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: pod.Spec},
		},
	}
	start := time.Now()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
		if err != nil {
			t.Fatal(err)
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				pods = append(pods, p)
			}
		}
		if len(pods) == len(nodes) {
			break
		}
		if ctx.Err() != nil || time.Since(start) > 3*time.Minute {
			var states []string
			for _, p := range list.Items {
				states = append(states, fmt.Sprintf("%s on %s: %s%s", p.Name, p.Spec.NodeName, p.Status.Phase, harness.Events(ctx, c.Client, ns, "Pod", p.Name)))
			}
			t.Fatalf("%d of %d replicas ready after %s: %s", len(pods), len(nodes), time.Since(start).Round(time.Second), strings.Join(states, "; "))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("TIMING %d replicas ready on %d nodes: %.1fs", len(pods), len(nodes), time.Since(start).Seconds())
	seen := map[string]bool{}
	for _, p := range pods {
		if got := p.Spec.Containers[0].Image; got != want {
			t.Errorf("pod %s on %s runs %s, want %s (the agent's rewrite)", p.Name, p.Spec.NodeName, got, want)
		}
		if id := p.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, want[strings.Index(want, "@")+1:]) {
			t.Errorf("pod %s on %s: image ID %s", p.Name, p.Spec.NodeName, id)
		}
		seen[p.Spec.NodeName] = true
		t.Logf("pod %s on %s pulled %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
	}
	for _, n := range nodes {
		if !seen[n] {
			t.Errorf("no replica on node %s", n)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// connectAndPull runs `ferry registry connect -o json`, logs in to the
// address it prints with ferry registry login, lists and pulls the
// deployed image with crane and oras, then stops it with SIGINT.
func connectAndPull(ctx context.Context, t *testing.T, c *harness.Cluster, digest string) {
	t.Helper()
	crane, oras := peertool.Require(t, "crane"), peertool.Require(t, "oras")
	cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "registry", "connect", "--kubeconfig", c.Kubeconfig, "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var conn struct {
		Address  string  `json:"address"`
		Username string  `json:"username"`
		Secret   string  `json:"secret"`
		Via      string  `json:"via"`
		Protocol string  `json:"protocol"`
		Seconds  float64 `json:"seconds"`
	}
	if err := json.NewDecoder(stdout).Decode(&conn); err != nil || conn.Address == "" {
		t.Fatalf("registry connect printed %+v (%v); stderr %s", conn, err, stderr.String())
	}
	t.Logf("TIMING registry connect: %s over %s, tunnel ready in %.3fs, printed after %.2fs (process start included)", conn.Address, conn.Protocol, conn.Seconds, time.Since(start).Seconds())

	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	account := cluster.AccountFromData(sec.Data)
	if conn.Username != account.Username || conn.Secret != cluster.DefaultNamespace+"/"+cluster.AuthSecretName {
		t.Fatalf("connect names account %s in %s", conn.Username, conn.Secret)
	}
	docker := t.TempDir()
	env := append(os.Environ(), "DOCKER_CONFIG="+docker)
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = env
		if name == filepath.Join(binDir(t), "ferry") {
			cmd.Stdin = strings.NewReader(account.Password)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(filepath.Join(binDir(t), "ferry"), "registry", "login", conn.Address, "-u", account.Username, "--password-stdin")
	if out := run(crane, "catalog", conn.Address); !strings.Contains(out, "library/app") {
		t.Errorf("crane catalog: %s", out)
	}
	if out := run(crane, "ls", conn.Address+"/library/app"); !strings.Contains(out, "1.0") {
		t.Errorf("crane ls: %s", out)
	}
	if out := strings.TrimSpace(run(crane, "digest", conn.Address+"/library/app:1.0")); out != digest {
		t.Errorf("crane digest: %s, want %s", out, digest)
	}
	tarball := filepath.Join(t.TempDir(), "app.tar")
	run(crane, "pull", conn.Address+"/library/app@"+digest, tarball)
	if fi, err := os.Stat(tarball); err != nil || fi.Size() == 0 {
		t.Errorf("crane pull: %v", err)
	}
	if out := run(oras, "repo", "ls", "--plain-http", conn.Address); !strings.Contains(out, "library/app") {
		t.Errorf("oras repo ls: %s", out)
	}
	if out := run(oras, "manifest", "fetch", "--plain-http", conn.Address+"/library/app@"+digest); !strings.Contains(out, "layers") {
		t.Errorf("oras manifest fetch: %s", out)
	}
	out := filepath.Join(t.TempDir(), "oras")
	run(oras, "copy", "--from-plain-http", conn.Address+"/library/app@"+digest, "--to-oci-layout", out+":app")
	if _, err := os.Stat(filepath.Join(out, "index.json")); err != nil {
		t.Errorf("oras copy: %v", err)
	}

	// Ctrl-C closes it cleanly: exit 0, the address no longer answers.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("registry connect after SIGINT: %v: %s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("registry connect did not stop 10 s after SIGINT")
	}
	if c, err := net.DialTimeout("tcp", conn.Address, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after registry connect stopped", conn.Address)
	}
	connectText(ctx, t, c, account.Username)
}

// connectText runs registry connect with its text output, as a person
// would: it names the address, the tunnel's Pod and how to log in, the
// address answers, and Ctrl-C closes it with a word on stderr.
func connectText(ctx context.Context, t *testing.T, c *harness.Cluster, username string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "registry", "connect", "--kubeconfig", c.Kubeconfig)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "press Ctrl-C") {
			break
		}
	}
	if len(lines) != 3 {
		t.Fatalf("registry connect printed %q; stderr %s", lines, stderr.String())
	}
	t.Logf("registry connect prints:\n%s", strings.Join(lines, "\n"))
	var addr string
	if _, err := fmt.Sscanf(lines[0], "registry at %s (tunnel to pod", &addr); err != nil || !strings.Contains(lines[0], "over "+kube.ProtocolProxy) {
		t.Errorf("first line %q: want the address and the tunnel's Pod and protocol (%v)", lines[0], err)
	}
	for _, want := range []string{"ferry registry login " + addr + " -u " + username + " --password-stdin", cluster.AuthSecretName} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("login line %q does not say %q", lines[1], want)
		}
	}
	if err := reach.WaitRegistry(ctx, addr, 10*time.Second); err != nil {
		t.Errorf("the printed address %s: %v", addr, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(stderr.String(), "tunnel closed") {
		t.Errorf("registry connect after Ctrl-C: %v; stderr %q", err, stderr.String())
	}
}

// registryNodeDown stops the kubelet of the registry's node: deploy then
// fails with a one-line error naming the node and `ferry init`; init moves
// the registry to another node and injects it again; deploy works again
// and a Pod on another node pulls the image anew.
func registryNodeDown(ctx context.Context, t *testing.T, c *harness.Cluster, pkg, pub, digest string, nodes []string) {
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.StateName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	down := cluster.StateFromData(sec.Data).Node
	if _, err := harness.Script(ctx, "nodes.sh", "stop-kubelet", down); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := harness.Script(ctx, "nodes.sh", "start-kubelet", down); err != nil {
			t.Error(err)
			return
		}
		if _, err := harness.WaitNodeReady(ctx, c.Client, down); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, down, metav1.GetOptions{})
		if err == nil && !nodeIsReady(n) {
			break
		}
		if ctx.Err() != nil || time.Since(start) > 2*time.Minute {
			t.Fatalf("node %s still Ready 2 minutes after its kubelet stopped", down)
		}
		time.Sleep(time.Second)
	}
	t.Logf("TIMING node %s NotReady %.1fs after its kubelet stopped", down, time.Since(start).Seconds())

	// What the user sees: one line naming the cause and the fix.
	var msg string
	for deadline := time.Now().Add(time.Minute); ; {
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", pkg, "--key", pub, "--kubeconfig", c.Kubeconfig).CombinedOutput()
		if err == nil {
			t.Fatalf("deploy with the registry's node down succeeded: %s", out)
		}
		msg = strings.TrimSpace(string(out))
		if strings.Contains(msg, "no ready registry Pod") || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("deploy with the registry's node down: %s", msg)
	for _, s := range []string{"no ready registry Pod", down, "NotReady", "ferry init"} {
		if !strings.Contains(msg, s) {
			t.Errorf("the error does not say %q", s)
		}
	}
	if strings.Count(msg, "\n") > 0 {
		t.Errorf("the error is not one line")
	}

	// init repairs: the registry moves to a Ready node.
	var res struct {
		Node        string  `json:"node"`
		Injected    bool    `json:"injected"`
		Seconds     float64 `json:"seconds"`
		RegistryVia via     `json:"registryVia"`
	}
	if err := ferryJSON(ctx, t, c, &res, "init", "--bin-dir", binDir(t)); err != nil {
		t.Fatal(err)
	}
	if res.Node == down || !res.Injected {
		t.Fatalf("init with node %s down: %+v", down, res)
	}
	t.Logf("TIMING init moved the registry from %s to %s in %.1fs", down, res.Node, res.Seconds)

	// The registry is empty there: deploy pushes again, and a Pod on a
	// node that is up pulls from it.
	if deployPushed(ctx, t, c, pkg, pub) == 0 {
		t.Errorf("deploy after the move pushed nothing")
	}
	ns := c.Namespace(t)
	for _, n := range nodes {
		if n == down {
			continue
		}
		p := tinyPod("app-"+n, "docker.io/library/app:1.0", corev1.PullAlways)
		p.Spec.NodeName = n
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := harness.WaitPodReady(ctx, c.Client, ns, p.Name)
		if err != nil {
			t.Fatalf("pod on %s after the move: %v", n, err)
		}
		if want := "127.0.0.1:31999/library/app@" + digest; got.Spec.Containers[0].Image != want {
			t.Errorf("pod on %s runs %s, want %s", n, got.Spec.Containers[0].Image, want)
		}
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Log(err)
	}
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// limitedKubeconfig is a kubeconfig for a ServiceAccount that may read
// ferry's Secrets and list its Pods, but not port-forward to them.
func limitedKubeconfig(ctx context.Context, t *testing.T, c *harness.Cluster) string {
	t.Helper()
	return tokenKubeconfig(ctx, t, c, "e2e-no-portforward", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets", "pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
	})
}

// rejected sums the packets the workstation's firewall rejected since the
// counters were zeroed, and returns the rules' lines.
func rejected(t *testing.T) (int64, string) {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "-L", "OUTPUT", "-v", "-x", "-n").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -L: %v: %s", err, out)
	}
	var n int64
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[2] == "REJECT" {
			var p int64
			fmt.Sscan(f[0], &p)
			n += p
			lines = append(lines, strings.Join(f, " "))
		}
	}
	return n, strings.Join(lines, "; ")
}

// pushResumes deploys a package of 300 MiB through a tunnel and deletes the
// registry's Pod as the push begins: the tunnel dials the new Pod, the push
// is retried and skips the blobs that went up, and deploy succeeds.
func pushResumes(ctx context.Context, t *testing.T, c *harness.Cluster) {
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	rng := fixture.Rand(uint64(time.Now().UnixNano()))
	// Small layers that are stored at once, and a big one still going up
	// when the registry's Pod is deleted: the push goes through a proxy that
	// paces it at 12 MiB/s, so the big layer takes at least 10 s, time
	// enough for the Pod's deletion however fast the machine.
	var layers []fixture.Layer
	for range 5 {
		layers = append(layers, fixture.NewLayer(rng, 10<<20))
	}
	layers = append(layers, fixture.NewLayer(rng, 120<<20))
	small := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: godigest.FromBytes(layers[0].Data), Size: int64(len(layers[0].Data))}
	var total int64
	for _, l := range layers {
		total += int64(len(l.Data))
	}
	d, err := fixture.PushImage(ctx, store, fixture.Platform("linux", goruntime.GOARCH, ""), layers)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, d, "1.0"); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: e2e-resume, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: big\n    images:\n      - {ref: docker.io/library/big:1.0, layout: images}\n", goruntime.GOARCH)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	pdef, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	pkg := filepath.Join(t.TempDir(), "resume.tar")
	if _, err := build.Create(ctx, pdef, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, SignKey: priv, Format: artifact.FormatTar}); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := reach.Registry(ctx, c.Client, reach.Options{Via: reach.Tunnel, Config: c.Config})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()

	// When verification has read every blob, the push begins; once a small
	// layer is stored, the registry's Pod is deleted.
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	account := cluster.AccountFromData(sec.Data)
	repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(ep.Host, auth.Credential{Username: account.Username, Password: account.Password}), Client: reach.RegistryClient()}.Repository(ep.Host + "/e2e-resume") // the package's own repository: every blob goes there first
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	var once sync.Once
	deleted := make(chan string, 1)
	progress := func(p artifact.Progress) {
		if p.Phase != artifact.PhaseRead || p.Partial || read.Add(p.Bytes) < total {
			return
		}
		once.Do(func() {
			go func() {
				for {
					if ok, _ := repo.Blobs().Exists(ctx, small); ok {
						break
					}
					if ctx.Err() != nil {
						deleted <- "gave up: " + ctx.Err().Error()
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(cluster.RegistryLabels()).String()})
				if err != nil || len(pods.Items) == 0 {
					deleted <- fmt.Sprintf("no registry pod: %v", err)
					return
				}
				name := pods.Items[0].Name
				// At once (grace period 0): the big layer's upload is cut.
				zero := int64(0)
				if err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
					deleted <- err.Error()
					return
				}
				deleted <- "force-deleted " + name + " once layer " + small.Digest.String() + " was stored"
			}()
		})
	}
	slow := pacedProxy(ctx, t, ep.Host, 12<<20)
	start := time.Now()
	rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}, Registry: slow, Progress: progress})
	if err != nil {
		t.Fatalf("deploy while the registry Pod restarted: %v (tunnel: %v)", err, ep.Err())
	}
	select {
	case msg := <-deleted:
		t.Logf("registry pod: %s", msg)
	case <-time.After(10 * time.Second):
		t.Fatalf("the registry pod was not deleted during the deploy (%d bytes verified)", read.Load())
	}
	t.Logf("TIMING deploy of 170 MiB (5 × 10 MiB + 120 MiB, paced at 12 MiB/s) through the tunnel while the registry Pod restarted: %.1fs (push %.1fs, %d bytes in the last attempt); the tunnel dialled %d times, last error %v",
		time.Since(start).Seconds(), rec.PushTook.Seconds(), rec.BytesPushed, ep.Dials(), ep.Err())
	if ep.Dials() < 2 {
		t.Errorf("the tunnel dialled %d times: the registry Pod did not restart during the push", ep.Dials())
	}
	if rec.BytesPushed >= total {
		t.Errorf("the last attempt pushed %d bytes, all %d of the layers: nothing stored before the kill was skipped", rec.BytesPushed, total)
	}
	st := &rollout.State{Client: c.Client, Namespace: cluster.DefaultNamespace}
	if err := st.Delete(ctx, rec.Name); err != nil {
		t.Error(err)
	}
}

// pacedProxy listens on loopback and forwards each connection to addr,
// the bytes towards addr paced at bytesPerSecond in all (a push that
// cannot finish before a fault the test injects mid-way). It returns its
// address; it stops with the test.
func pacedProxy(ctx context.Context, t *testing.T, addr string, bytesPerSecond int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	const chunk = 32 << 10
	limit := rate.NewLimiter(rate.Limit(bytesPerSecond), chunk)
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer down.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					io.Copy(down, up)
					down.Close()
				}()
				buf := make([]byte, chunk)
				for {
					n, err := down.Read(buf)
					if n > 0 {
						if limit.WaitN(ctx, n) != nil {
							return
						}
						if _, err := up.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// clusterIsolated shows that the cluster's network namespaces (the nodes'
// and the workstation's, FERRY_E2E_NETNS*) have no way beyond the cluster:
// none holds a device but loopback, bridges and veths; no veth of the
// host's namespace (where a way out would start) leads into one of them or
// into a Pod's; and a connection from each node to an address outside
// fails at once.
func clusterIsolated(ctx context.Context, t *testing.T) {
	t.Helper()
	prefix := os.Getenv("FERRY_E2E_NETNS")
	if prefix == "" {
		t.Fatal("FERRY_E2E_NETNS is not set")
	}
	ours := func(ns string) bool { return ns == prefix || strings.HasPrefix(ns, prefix+"-") }
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	hostNet := os.Getenv("FERRY_E2E_HOST_NET") // exec.sh names it
	if hostNet == "" {
		t.Fatal("FERRY_E2E_HOST_NET is not set: run the test with e2e/cluster/exec.sh")
	}
	host := []string{"nsenter", "--net=" + hostNet, "--"}
	// The host's names for the namespaces' ids: "NAME (id: N)".
	ids := map[string]string{}
	var cluster []string
	for _, l := range strings.Split(run(append(host, "ip", "netns", "list")...), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) == 3 && f[1] == "(id:" {
			ids[strings.TrimSuffix(f[2], ")")] = f[0]
		}
		if ours(f[0]) {
			cluster = append(cluster, f[0])
		}
	}
	if len(cluster) < 3 {
		t.Fatalf("the cluster's namespaces: %v", cluster)
	}
	for _, l := range strings.Split(run(append(host, "ip", "-d", "-o", "link", "show", "type", "veth")...), "\n") {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			peer := ""
			switch f[i] {
			case "link-netns":
				peer = f[i+1]
			case "link-netnsid":
				peer = ids[f[i+1]]
			}
			if ours(peer) || strings.HasPrefix(peer, "cni-") {
				t.Errorf("the host's veth %s leads into the cluster's namespace %s", strings.TrimSuffix(f[1], ":"), peer)
			}
		}
	}
	for _, ns := range cluster {
		in := []string{"nsenter", "--net=/var/run/netns/" + ns, "--"}
		for _, l := range strings.Split(strings.TrimSpace(run(append(in, "ip", "-d", "-o", "link", "show")...)), "\n") {
			if !strings.Contains(l, "link/loopback") && !strings.Contains(l, " veth ") && !strings.Contains(l, " bridge ") {
				t.Errorf("namespace %s holds a device that is neither loopback, bridge nor veth: %s", ns, l)
			}
		}
		if strings.HasSuffix(ns, "-ws") {
			continue // its firewall is checked below
		}
		// 192.0.2.1 (TEST-NET-1, RFC 5737): outside any harness.
		cmd := exec.CommandContext(ctx, in[0], append(in[1:], "timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/192.0.2.1/443")...)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("node namespace %s connected to 192.0.2.1:443", ns)
		} else {
			t.Logf("node namespace %s: a connection out fails: %s", ns, strings.TrimSpace(string(out)))
		}
	}
	t.Logf("zero egress: the cluster's %d namespaces hold only loopback, bridges and veths among themselves and their Pods; no device of the host's leads into them", len(cluster))
}
