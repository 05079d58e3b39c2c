package inject

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/unreachable"
)

// The registry account and the defaults of InitOptions; the names of what
// Init leaves in the cluster are package internal/cluster's.
const (
	// RegistryUser is the registry account init creates.
	RegistryUser = "ferry"
	// DefaultStorageDir is the registry's storage on its node (hostPath).
	DefaultStorageDir = "/var/lib/ferry/registry"
	// DefaultWaitTimeout bounds each waiting step of Init.
	DefaultWaitTimeout = 3 * time.Minute
	// DefaultS3Replicas is how many registry Pods run on S3 storage when
	// InitOptions.Replicas is 0.
	DefaultS3Replicas = 2
)

// S3Storage is the in-cluster registry's storage in an S3-compatible object
// store, through distribution's own S3 driver: every replica serves the same
// content, and losing a node loses nothing.
type S3Storage struct {
	// URL is s3://bucket[/prefix]?endpoint=URL&region=R&path-style=true,
	// without credentials (the registry's cluster.StorageEnv).
	URL string
	// CredentialsSecret names a Secret in ferry's namespace holding
	// cluster.AccessKeyIDKey and cluster.SecretAccessKeyKey; the registry's
	// container gets them as environment variables, nothing else sees them.
	CredentialsSecret string
	// CABundle, when set, is the PEM bundle of the CA the endpoint's
	// certificate chains to (ConfigMap cluster.CAName).
	CABundle []byte
}

// RegistryFileName is the file name of the in-cluster registry binary for
// goarch, as `make build` writes it into bin/ beside ferry.
func RegistryFileName(goarch string) string { return "ferry-registry-linux-" + goarch }

// InitOptions configure Init. Zero values take the documented defaults.
type InitOptions struct {
	// Namespace for everything; cluster.DefaultNamespace if empty.
	Namespace string
	// BinDir holds the stage-1 injectors and the registry binaries per
	// architecture (Stage1FileName, RegistryFileName). Required.
	BinDir string
	// NodePort is where the registry answers on every node;
	// cluster.DefaultNodePort if 0.
	NodePort int32
	// ChunkSize of the injector's ConfigMaps; DefaultChunkSize if ≤ 0.
	ChunkSize int
	// StorageDir is the registry storage on its node; DefaultStorageDir if empty.
	StorageDir string
	// S3, when set, keeps the registry's storage in an object store instead
	// of StorageDir on one node, and runs Replicas registry Pods spread over
	// the nodes.
	S3 *S3Storage
	// Replicas of the registry: 1 on the filesystem (its only choice);
	// DefaultS3Replicas with S3 when 0.
	Replicas int32
	// Migrate, when the registry moves from its node's filesystem to S3,
	// first copies every repository to the bucket and verifies every blob
	// there (`ferry-registry migrate` in a Job on the registry's node, the
	// registry read-only meanwhile). Without it Init refuses a switch of
	// storage that deployed packages use.
	Migrate bool
	// WaitTimeout bounds each step that waits on the cluster;
	// DefaultWaitTimeout if 0.
	WaitTimeout time.Duration
	// Via says whether this process runs on a node. With reach.NodePort,
	// Init waits until 127.0.0.1:NodePort leads to the injector before the
	// registry pulls through it. Otherwise (reach.Auto, reach.Tunnel: a
	// workstation, which cannot see the NodePort) it does not; a registry
	// Pod whose pull failed because a node's kube-proxy had not caught up
	// yet is deleted, and its replacement pulls again at once instead of
	// after the kubelet's back-off.
	Via reach.Via
	// RegistryReady, if set, is called during the hand-over where this
	// process runs on a node, with the address (IP:port) of a ready
	// registry Pod and the node's architecture: the Pod answers there
	// while kube-proxy still leads the NodePort to the injector (a second
	// or so), so a caller may start pushing to it. It must not block.
	RegistryReady func(addr, arch string)
	// NamespaceReady, if set, is called once the namespace exists, so that
	// a caller may make its own objects there meanwhile. It must not
	// block.
	NamespaceReady func()
	// DeferInjectorWait: the clean-up deletes the injector's objects in
	// the background (deleting 1 MiB ConfigMaps and a Pod takes the API
	// server and the kubelet seconds); the caller waits for it with
	// InitResult.WaitCleanup once it has done its own work (install.Init
	// does, after the agent).
	DeferInjectorWait bool
	// Config is the REST configuration Init reaches the registry with
	// (a tunnel from a workstation): with it, a registry running another
	// ferry's image is replaced in place, with no moment when a pull
	// fails; without it (and Via not NodePort), it is injected anew.
	Config *rest.Config
	// Progress, if set, is told of each step as it finishes.
	Progress func(Step)
}

// Step is one finished step of Init.
type Step struct {
	Name   string
	Detail string
	Took   time.Duration
}

// InitResult tells what Init found or did.
type InitResult struct {
	Registry      string        `json:"registry"` // host:port on every node
	Image         string        `json:"image"`    // the registry image, by digest
	Node          string        `json:"node"`
	BorrowedImage string        `json:"borrowedImage,omitempty"`
	ConfigMaps    int           `json:"configMaps"`
	PayloadChunks int           `json:"payloadChunks"`
	PayloadSize   int           `json:"payloadSize"`
	PayloadDigest digest.Digest `json:"payloadDigest"`
	// Injected is false when the registry was already running its image
	// and init only checked (and repaired) the rest.
	Injected bool `json:"injected"`
	// Arch is the registry image's architecture (the node's).
	Arch string `json:"arch"`
	// Storage is the registry's S3 storage URL; empty: the filesystem.
	Storage string `json:"storage,omitempty"`
	// Replicas is how many registry Pods run.
	Replicas int32 `json:"replicas"`

	// cleanup, with InitOptions.DeferInjectorWait, reports the injector's
	// deletion.
	cleanup chan error
}

// WaitCleanup waits until the injector's objects are gone, after Init with
// InitOptions.DeferInjectorWait (otherwise they are already).
func (r *InitResult) WaitCleanup(ctx context.Context) error {
	if r.cleanup == nil {
		return nil
	}
	select {
	case err := <-r.cleanup:
		r.cleanup <- err // for a second call
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StepError says which step of Init failed: "init: <step>: <cause>".
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string {
	return "init: " + e.Step + ": " + unreachable.Said(e.Err).Error()
}

func (e *StepError) Unwrap() error { return e.Err }

// Init bootstraps the in-cluster registry, idempotently: the registry
// image (built from the registry binary for the node's architecture) is
// carried into the cluster in ConfigMap chunks, served by the injector on
// the NodePort, pulled from there by digest by the registry Deployment,
// which then takes over the NodePort; the injector's objects are deleted,
// and the registry's account and address are recorded (cluster.State,
// cluster.Account) for later commands. A second run finds the registry
// running its image and only repairs what is missing (credentials,
// Service, leftovers). The agent is installed next, by deploy/agent.Install.
func Init(ctx context.Context, cs kubernetes.Interface, opts InitOptions) (*InitResult, error) {
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.NodePort == 0 {
		opts.NodePort = cluster.DefaultNodePort
	}
	if opts.StorageDir == "" {
		opts.StorageDir = DefaultStorageDir
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
		if opts.S3 != nil {
			opts.Replicas = DefaultS3Replicas
		}
	}
	in := &initRun{cs: cs, opts: opts, ns: opts.Namespace, res: &InitResult{Registry: cluster.RegistryHost(opts.NodePort), Replicas: opts.Replicas}}
	if opts.S3 != nil {
		in.res.Storage = opts.S3.URL
	}
	steps := []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{"storage", in.storage},
		{"namespace", in.namespace},
		{"credentials", in.credentials},
		{"migrate", in.migrateStorage},
		{"node", in.node},
		{"registry image", in.image},
		{"check registry", in.check},
		{"injector", in.injector},
		{"registry", in.registry},
		{"hand-over", in.handOver},
		{"clean-up", in.cleanUp},
		{"state", in.state},
	}
	for _, s := range steps {
		start := time.Now()
		detail, err := s.fn(ctx)
		if err != nil {
			return nil, &StepError{Step: s.name, Err: err}
		}
		if opts.Progress != nil && detail != "" {
			opts.Progress(Step{Name: s.name, Detail: detail, Took: time.Since(start)})
		}
	}
	return in.res, nil
}

type initRun struct {
	cs       kubernetes.Interface
	opts     InitOptions
	ns       string
	res      *InitResult
	arch     string
	htpasswd []byte
	payload  Payload
	healthy  bool               // the registry already runs the right image
	moveFrom string             // the registry's node, NotReady or gone: it moves
	respec   bool               // the registry runs the right image, with other storage or replicas
	rolling  bool               // the registry runs another image: replaced in place
	migrate  *appsv1.Deployment // the filesystem registry to copy to S3 first
}

func (in *initRun) labels(component string) map[string]string {
	return map[string]string{cluster.LabelName: cluster.RegistryName, cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelComponent: component}
}

func (in *initRun) namespace(ctx context.Context) (string, error) {
	detail, err := in.makeNamespace(ctx)
	if err == nil && in.opts.NamespaceReady != nil {
		in.opts.NamespaceReady()
	}
	return detail, err
}

func (in *initRun) makeNamespace(ctx context.Context) (string, error) {
	_, err := in.cs.CoreV1().Namespaces().Get(ctx, in.ns, metav1.GetOptions{})
	if err == nil {
		return "exists", nil
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	_, err = in.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.ns, Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return "created " + in.ns, nil
}

// credentials makes the registry account once and keeps it: a generated
// password, its htpasswd line, and a pull secret for cluster.RegistryHost.
func (in *initRun) credentials(ctx context.Context) (string, error) {
	secrets := in.cs.CoreV1().Secrets(in.ns)
	auth, err := secrets.Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	detail := "kept"
	if apierrors.IsNotFound(err) {
		pw := make([]byte, 24)
		if _, err := rand.Read(pw); err != nil {
			return "", err
		}
		password := base64.RawURLEncoding.EncodeToString(pw)
		// The password is 192 random bits, which no work factor makes
		// stronger; the registry checks it on every request, and at the
		// default cost (10) that took ~60 ms of its CPU each time —
		// most of a push's small requests (HEAD, mount, manifest).
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			return "", err
		}
		account := cluster.Account{Username: RegistryUser, Password: password, Htpasswd: []byte(RegistryUser + ":" + string(hash) + "\n")}
		auth = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: cluster.AuthSecretName, Namespace: in.ns, Labels: in.labels("registry")},
			Data:       account.Data(),
		}
		if auth, err = secrets.Create(ctx, auth, metav1.CreateOptions{}); err != nil {
			return "", err
		}
		detail = "generated"
	} else if err != nil {
		return "", err
	}
	if len(auth.Data[cluster.HTTPSecretKey]) == 0 {
		// The replicas' shared HTTP secret (an upload begun on one replica
		// goes on on another), added to an account made before it existed.
		hs := make([]byte, 32)
		if _, err := rand.Read(hs); err != nil {
			return "", err
		}
		if auth.Data == nil {
			auth.Data = map[string][]byte{}
		}
		auth.Data[cluster.HTTPSecretKey] = []byte(fmt.Sprintf("%x", hs))
		if auth, err = secrets.Update(ctx, auth, metav1.UpdateOptions{}); err != nil {
			return "", err
		}
	}
	account := cluster.AccountFromData(auth.Data)
	in.htpasswd = account.Htpasswd
	user, pass := account.Username, account.Password
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{in.res.Registry: map[string]string{
		"username": user, "password": pass, "auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass)),
	}}})
	if err != nil {
		return "", err
	}
	pull := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.PullSecretName, Namespace: in.ns, Labels: in.labels("registry")},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	if err := kube.ApplySecret(ctx, secrets, pull); err != nil {
		return "", err
	}
	return detail + " (user " + user + ", secrets " + cluster.AuthSecretName + ", " + cluster.PullSecretName + ")", nil
}

// node picks the node for the injector and the registry: the registry's
// node when it exists, else the first Ready node; and the smallest image
// that node already has, to borrow.
func (in *initRun) node(ctx context.Context) (string, error) {
	nodes, err := in.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	want := ""
	if d, err := in.cs.AppsV1().Deployments(in.ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{}); err == nil {
		want = d.Spec.Template.Spec.NodeName
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	// The registry stays on its node while that is Ready, cordoned or not
	// (its storage is there); a new or moving registry goes to the first
	// Ready node that takes Pods.
	var node *corev1.Node
	for i, n := range nodes.Items {
		if !nodeReady(&n) || (n.Spec.Unschedulable && n.Name != want) {
			continue
		}
		if node == nil || n.Name == want {
			node = &nodes.Items[i]
		}
	}
	if node == nil {
		return "", fmt.Errorf("no Ready node that takes Pods among %d", len(nodes.Items))
	}
	if want != "" && node.Name != want {
		in.moveFrom = want
	}
	in.res.Node, in.arch = node.Name, node.Status.NodeInfo.Architecture
	in.res.Arch = in.arch
	if in.arch != "amd64" && in.arch != "arm64" {
		return "", fmt.Errorf("node %s is %s; ferry ships amd64 and arm64", node.Name, in.arch)
	}
	// The smallest image with a tagged name: the kubelet finds an image by
	// tag for certain, while a bare repo@digest name the node reports may
	// have lost its reference in the runtime (then the injector would fail
	// with ErrImageNeverPull). Only when no image has a tag, the smallest.
	tagged := func(img corev1.ContainerImage) string {
		for _, n := range img.Names {
			if !strings.Contains(n, "@") {
				return n
			}
		}
		return ""
	}
	better := func(a, b corev1.ContainerImage) bool {
		if ta, tb := tagged(a) != "", tagged(b) != ""; ta != tb {
			return ta
		}
		return a.SizeBytes < b.SizeBytes
	}
	var best corev1.ContainerImage
	for _, img := range node.Status.Images {
		if len(img.Names) > 0 && (best.Names == nil || better(img, best)) {
			best = img
		}
	}
	if best.Names == nil {
		return "", fmt.Errorf("node %s reports no image to borrow for the injector", node.Name)
	}
	in.res.BorrowedImage = best.Names[0]
	if n := tagged(best); n != "" {
		in.res.BorrowedImage = n
	}
	return fmt.Sprintf("%s (linux/%s), borrowing %s", node.Name, in.arch, in.res.BorrowedImage), nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
