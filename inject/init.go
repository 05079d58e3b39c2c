package inject

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	orasauth "oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/kube"
	"github.com/ferrypkg/ferry/internal/reach"
	"github.com/ferrypkg/ferry/internal/scratch"
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
}

// StepError says which step of Init failed: "init: <step>: <cause>".
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return "init: " + e.Step + ": " + e.Err.Error() }
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
	migrate  *appsv1.Deployment // the filesystem registry to copy to S3 first
}

func (in *initRun) labels(component string) map[string]string {
	return map[string]string{cluster.LabelName: cluster.RegistryName, cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelComponent: component}
}

// storage checks the storage choice before anything changes: replicas the
// storage allows, the credentials Secret S3 needs, and a switch of storage
// that would strand what deployed packages use.
func (in *initRun) storage(ctx context.Context) (string, error) {
	o := in.opts
	if o.Replicas < 1 {
		return "", fmt.Errorf("replicas %d: want at least 1", o.Replicas)
	}
	want := "filesystem " + o.StorageDir
	if o.S3 == nil {
		if o.Replicas != 1 {
			return "", fmt.Errorf("filesystem storage runs 1 replica (its hostPath is on one node), not %d: use S3 storage for more", o.Replicas)
		}
	} else {
		want = o.S3.URL
		if o.S3.URL == "" || o.S3.CredentialsSecret == "" {
			return "", errors.New("S3 storage needs a URL and the name of the Secret with its credentials")
		}
		sec, err := in.cs.CoreV1().Secrets(in.ns).Get(ctx, o.S3.CredentialsSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("S3 credentials: Secret %s not found in namespace %s (create it with keys %s and %s)", o.S3.CredentialsSecret, in.ns, cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey)
		}
		if err != nil {
			return "", fmt.Errorf("S3 credentials: %w", err)
		}
		for _, k := range []string{cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey} {
			if len(sec.Data[k]) == 0 {
				return "", fmt.Errorf("S3 credentials: Secret %s has no %s", o.S3.CredentialsSecret, k)
			}
		}
	}
	d, err := in.cs.AppsV1().Deployments(in.ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("%s, %d replica(s)", want, o.Replicas), nil
	}
	if err != nil {
		return "", err
	}
	cur := DeploymentStorage(d)
	if cur == "" {
		cur = "filesystem"
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "storage" && v.HostPath != nil {
				cur += " " + v.HostPath.Path
			}
		}
	}
	if cur == want {
		return fmt.Sprintf("%s, %d replica(s)", want, o.Replicas), nil
	}
	pkgs, err := in.cs.CoreV1().Secrets(in.ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelPackage})
	if err != nil {
		return "", err
	}
	if o.Migrate {
		if DeploymentStorage(d) != "" || o.S3 == nil {
			return "", fmt.Errorf("migrate from %s to %s: only from the filesystem to S3", cur, want)
		}
		in.migrate = d
		return fmt.Sprintf("switching from %s to %s, %d replica(s), copying every repository first", cur, want, o.Replicas), nil
	}
	if len(pkgs.Items) > 0 {
		return "", fmt.Errorf("the registry's storage is %s and %d deployed package(s) use it: switching to %s would strand them (pass --migrate to copy every repository first)", cur, len(pkgs.Items), want)
	}
	return fmt.Sprintf("switching from %s to %s, %d replica(s)", cur, want, o.Replicas), nil
}

// migrateStorage copies the filesystem registry's storage to the bucket
// before the registry moves there: a Job on the registry's node, from the
// registry's own image (in that node's cache), mounts the hostPath and runs
// `ferry-registry migrate` with the bucket's credentials. The registry is
// read-only meanwhile and serves pulls.
func (in *initRun) migrateStorage(ctx context.Context) (string, error) {
	d := in.migrate
	if d == nil {
		return "", nil
	}
	old := d.Spec.Template.Spec
	var dir string
	for _, v := range old.Volumes {
		if v.Name == "storage" && v.HostPath != nil {
			dir = v.HostPath.Path
		}
	}
	if dir == "" || old.NodeName == "" {
		return "", fmt.Errorf("the registry Deployment has no hostPath storage on a node to copy")
	}
	// The bucket's environment and CA, as the replicas will have them.
	nd := in.registryDeployment()
	env := nd.Spec.Template.Spec.Containers[0].Env
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range nd.Spec.Template.Spec.Volumes {
		if v.Name == "ca" {
			vols = append(vols, v)
		}
	}
	for _, m := range nd.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "ca" {
			mounts = append(mounts, m)
		}
	}
	image := old.Containers[0].Image
	f := false
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName + "-migrate", Namespace: in.ns, Labels: in.labels("registry-migrate")},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: in.labels("registry-migrate")},
				Spec: corev1.PodSpec{
					NodeName:                     old.NodeName,
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &f,
					EnableServiceLinks:           &f,
					Volumes: append(vols,
						corev1.Volume{Name: "storage", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr(corev1.HostPathDirectory)}}}),
					Containers: []corev1.Container{{
						Name:                     "migrate",
						Image:                    image,
						ImagePullPolicy:          corev1.PullIfNotPresent,
						Command:                  []string{cluster.RegistryBinaryPath, "migrate", "--from-root", cluster.RegistryRoot},
						Env:                      env,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						// Root owns the hostPath storage (and writes the
						// read-only flag there).
						SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: ptr(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: append(mounts, corev1.VolumeMount{Name: "storage", MountPath: cluster.RegistryRoot}),
					}},
				},
			},
		},
	}
	jobs := in.cs.BatchV1().Jobs(in.ns)
	bg := metav1.DeletePropagationBackground
	if err := jobs.Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err := kube.Poll(ctx, time.Minute, func() (bool, error) {
		_, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the previous migration Job gone"); err != nil {
		return "", err
	}
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create Job %s: %w", job.Name, err)
	}
	var done *batchv1.Job
	err := kube.Poll(ctx, 10*in.opts.WaitTimeout, func() (bool, error) {
		j, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		done = j
		return j.Status.Succeeded > 0 || j.Status.Failed > 0, nil
	}, "Job "+job.Name+" done")
	if err != nil {
		return "", err
	}
	msg := in.jobMessage(ctx, job.Name)
	if done.Status.Succeeded == 0 {
		return "", fmt.Errorf("Job %s failed: %s", job.Name, msg)
	}
	_ = jobs.Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	return fmt.Sprintf("copied %s on %s to the bucket: %s", dir, old.NodeName, msg), nil
}

// jobMessage is the termination message of the Job's Pod.
func (in *initRun) jobMessage(ctx context.Context, job string) string {
	pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if t := s.State.Terminated; t != nil {
				return strings.TrimSpace(t.Message)
			}
		}
	}
	return "no message"
}

// DeploymentStorage is the S3 storage URL a registry Deployment runs on,
// or "" for the filesystem.
func DeploymentStorage(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == cluster.StorageEnv {
				return e.Value
			}
		}
	}
	return ""
}

func (in *initRun) namespace(ctx context.Context) (string, error) {
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

// LoadRegistry reads the in-cluster registry binary for goarch from dir.
func LoadRegistry(dir, goarch string) ([]byte, error) {
	p := filepath.Join(dir, RegistryFileName(goarch))
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("registry binary for linux/%s: %w (build it with `make build`)", goarch, err)
	}
	return b, nil
}

// image builds the registry image for the node's architecture and its payload.
func (in *initRun) image(ctx context.Context) (string, error) {
	bin, err := LoadRegistry(in.opts.BinDir, in.arch)
	if err != nil {
		return "", err
	}
	tmp, err := scratch.MkdirTemp("", "ferry-registry-image-")
	if err != nil {
		return "", err
	}
	defer tmp.Remove()
	dir := tmp.Path
	desc, err := BuildImage(ctx, dir, ImageOptions{Arch: in.arch, Binary: bin})
	if err != nil {
		return "", err
	}
	if in.payload, err = NewPayload(os.DirFS(dir)); err != nil {
		return "", err
	}
	in.res.Image = in.res.Registry + "/" + RegistryRepository + "@" + desc.Digest.String()
	in.res.PayloadSize, in.res.PayloadDigest = len(in.payload.Data), in.payload.Digest
	return fmt.Sprintf("%s (payload %d bytes, %s)", desc.Digest, len(in.payload.Data), in.payload.Digest), nil
}

// check finds out whether the registry already runs this image.
func (in *initRun) check(ctx context.Context) (string, error) {
	d, err := in.cs.AppsV1().Deployments(in.ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "no registry yet", nil
	case err != nil:
		return "", err
	}
	if in.moveFrom != "" {
		return fmt.Sprintf("the registry's node %s is NotReady or gone: moving the registry to %s, injecting (what it stored on %s stays there: deploy your packages again)", in.moveFrom, in.res.Node, in.moveFrom), nil
	}
	if d.Spec.Template.Spec.Containers[0].Image != in.res.Image {
		return "registry runs another image; injecting", nil
	}
	// Ready, or a restart whose image is on its node already.
	if err := kube.WaitPodReady(ctx, in.cs, in.ns, in.labels("registry"), 30*time.Second, nil); err != nil {
		return "registry not ready (" + err.Error() + "); injecting", nil
	}
	in.healthy = true
	if DeploymentStorage(d) != in.res.Storage || d.Spec.Replicas == nil || *d.Spec.Replicas != in.opts.Replicas {
		// Its image is in the registry (init pushes it there), so new
		// Pods on any node pull it from the registry.
		in.respec = true
		return "registry running " + in.res.Image + "; changing its storage or replicas", nil
	}
	return "registry running " + in.res.Image, nil
}

// injector applies the injector plan and waits for it to serve.
func (in *initRun) injector(ctx context.Context) (string, error) {
	if in.healthy {
		return "", nil
	}
	stage1, err := LoadStage1(in.opts.BinDir, in.arch)
	if err != nil {
		return "", err
	}
	plan, err := NewPlan(Options{
		Namespace: in.ns, NodeName: in.res.Node, Image: in.res.BorrowedImage, Arch: in.arch,
		Stage1: stage1, Payload: in.payload, ChunkSize: in.opts.ChunkSize, NodePort: in.opts.NodePort,
	})
	if err != nil {
		return "", err
	}
	in.res.ConfigMaps, in.res.PayloadChunks, in.res.Injected = len(plan.ConfigMaps), plan.PayloadChunks, true
	// The NodePort is the injector's until the registry takes it back.
	if err := kube.DeleteAndWait(ctx, in.cs.CoreV1().Services(in.ns), cluster.RegistryName); err != nil {
		return "", err
	}
	if err := RunInjector(ctx, in.cs, plan, in.opts.WaitTimeout); err != nil {
		return "", err
	}
	// The registry's pod pulls through the NodePort: on a node, wait until
	// it leads to the injector (anonymous reads allowed: 200). Elsewhere
	// the registry step restarts a pull that came too early.
	if in.opts.Via == reach.NodePort {
		if err := kube.WaitHTTP(ctx, cluster.RegistryHost(in.opts.NodePort), http.StatusOK, "the injector", in.opts.WaitTimeout); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("serving on NodePort %d from %d ConfigMaps (%d payload chunks, %d stage-1 chunks)", in.opts.NodePort, len(plan.ConfigMaps), plan.PayloadChunks, plan.Stage1Chunks), nil
}

// registry applies the registry Deployment and waits for its pod, whose
// image comes through the injector's NodePort, by digest.
func (in *initRun) registry(ctx context.Context) (string, error) {
	if err := in.storageObjects(ctx); err != nil {
		return "", err
	}
	if in.healthy && !in.respec {
		return "", nil
	}
	if err := kube.ApplyDeployment(ctx, in.cs, in.registryDeployment()); err != nil {
		return "", err
	}
	start := time.Now()
	// A registry Pod on a node that is down never finishes terminating,
	// and the Recreate strategy waits for it.
	if _, err := kube.DeletePodsOnDeadNodes(ctx, in.cs, in.ns, in.labels("registry")); err != nil {
		return "", err
	}
	// A pull through a NodePort that a node's kube-proxy does not route yet
	// fails into a back-off of up to minutes: a new Pod pulls at once. And
	// a Pod the old ReplicaSet makes on a dead node before it is scaled
	// down would hold the Recreate strategy forever.
	stop := kube.Tend(ctx, in.cs, in.ns, in.labels("registry"))
	// The rollout, not any Ready pod: the old one may still be Ready.
	err := kube.WaitRollout(ctx, in.cs, in.ns, cluster.RegistryName, in.opts.WaitTimeout)
	tended := stop()
	if err != nil {
		return "", err
	}
	if tended.Restarted > 0 {
		return fmt.Sprintf("Deployment %s ready, image pulled by digest through %s in %.1fs (%d pull(s) retried in a new Pod)", cluster.RegistryName, in.res.Registry, time.Since(start).Seconds(), tended.Restarted), nil
	}
	return fmt.Sprintf("Deployment %s ready, image pulled by digest through %s in %.1fs", cluster.RegistryName, in.res.Registry, time.Since(start).Seconds()), nil
}

func (in *initRun) registryDeployment() *appsv1.Deployment {
	l := in.labels("registry")
	f := false
	c := corev1.Container{
		Name:            "registry",
		Image:           in.res.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"--addr", ":" + strconv.Itoa(cluster.RegistryPort), "--root", cluster.RegistryRoot, "--htpasswd", "/auth/" + cluster.HtpasswdKey},
		Ports:           []corev1.ContainerPort{{Name: "registry", ContainerPort: cluster.RegistryPort, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("registry")}},
			PeriodSeconds: 2,
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Root owns the hostPath storage; no capability is kept.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr(int64(0)),
			AllowPrivilegeEscalation: &f,
			Privileged:               &f,
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "storage", MountPath: cluster.RegistryRoot},
			{Name: "auth", MountPath: "/auth", ReadOnly: true},
		},
	}
	spec := corev1.PodSpec{
		NodeName:                     in.res.Node, // its storage is on that node
		AutomountServiceAccountToken: &f,
		EnableServiceLinks:           &f,
		SecurityContext:              &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Volumes: []corev1.Volume{
			{Name: "storage", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: in.opts.StorageDir, Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
			{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: cluster.AuthSecretName, Items: []corev1.KeyToPath{{Key: cluster.HtpasswdKey, Path: cluster.HtpasswdKey}}}}},
		},
	}
	strategy := appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	if s3 := in.opts.S3; s3 != nil {
		in.s3Container(&c, &spec)
		// One Pod at a time is replaced, the others serve meanwhile.
		strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr(intstr.FromInt32(1)), MaxSurge: ptr(intstr.FromInt32(0)),
		}}
		if in.opts.Replicas == 1 {
			strategy.RollingUpdate.MaxUnavailable, strategy.RollingUpdate.MaxSurge = ptr(intstr.FromInt32(0)), ptr(intstr.FromInt32(1))
		}
	}
	spec.Containers = []corev1.Container{c}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName, Namespace: in.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(in.opts.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Strategy: strategy,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec},
		},
	}
}

// s3Container turns the filesystem registry's Pod into one replica of
// many on S3: the storage and the credentials from the environment, no
// hostPath and no node, spread over the nodes, ready when /v2/ answers.
func (in *initRun) s3Container(c *corev1.Container, spec *corev1.PodSpec) {
	s3 := in.opts.S3
	secretEnv := func(name, secret, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
		}}}
	}
	c.Args = []string{"--addr", ":" + strconv.Itoa(cluster.RegistryPort), "--htpasswd", "/auth/" + cluster.HtpasswdKey}
	c.Env = []corev1.EnvVar{
		{Name: cluster.StorageEnv, Value: s3.URL},
		secretEnv(cluster.AccessKeyIDKey, s3.CredentialsSecret, cluster.AccessKeyIDKey),
		secretEnv(cluster.SecretAccessKeyKey, s3.CredentialsSecret, cluster.SecretAccessKeyKey),
		secretEnv(cluster.HTTPSecretEnv, cluster.AuthSecretName, cluster.HTTPSecretKey),
	}
	// Nothing on the node: no root needed.
	c.SecurityContext.RunAsUser, c.SecurityContext.RunAsNonRoot = ptr(int64(65532)), ptr(true)
	c.VolumeMounts = []corev1.VolumeMount{{Name: "auth", MountPath: "/auth", ReadOnly: true}}
	spec.Volumes = spec.Volumes[1:] // no hostPath
	if len(s3.CABundle) > 0 {
		c.Env = append(c.Env, corev1.EnvVar{Name: "AWS_CA_BUNDLE", Value: cluster.CADir + "/" + cluster.CAKey})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "ca", MountPath: cluster.CADir, ReadOnly: true})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cluster.CAName},
		}}})
	}
	// Ready when the registry answers /v2/ (401: it asks for the account;
	// the image has no shell or HTTP client, the binary checks itself).
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{cluster.RegistryBinaryPath, "probe", "--addr", "127.0.0.1:" + strconv.Itoa(cluster.RegistryPort)}}},
		PeriodSeconds: 2, TimeoutSeconds: 2,
	}
	// A replica made on a node without its image (rescheduled, scaled up)
	// pulls it from the registry, which init pushed it to, with the
	// registry's account.
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: cluster.PullSecretName}}
	spec.NodeName = ""
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: in.labels("registry")},
	}}
	// A Pod on a node that went away is replaced after 30 s, not 5 min.
	for _, taint := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(30))})
	}
}

// storageObjects applies what the storage needs beside the Deployment: on
// S3 with several replicas a PodDisruptionBudget (a drain evicts one
// replica at a time), and the CA bundle's ConfigMap; on the filesystem
// neither.
func (in *initRun) storageObjects(ctx context.Context) error {
	pdbs := in.cs.PolicyV1().PodDisruptionBudgets(in.ns)
	if in.opts.S3 != nil && in.opts.Replicas > 1 {
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName, Namespace: in.ns, Labels: in.labels("registry")},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: in.labels("registry")},
			},
		}
		cur, err := pdbs.Get(ctx, pdb.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("PodDisruptionBudget %s: %w", pdb.Name, err)
			}
		case err != nil:
			return err
		default:
			cur.Spec = pdb.Spec
			if _, err := pdbs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("PodDisruptionBudget %s: %w", pdb.Name, err)
			}
		}
	} else if err := pdbs.Delete(ctx, cluster.RegistryName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	cms := in.cs.CoreV1().ConfigMaps(in.ns)
	if in.opts.S3 == nil || len(in.opts.S3.CABundle) == 0 {
		if err := cms.Delete(ctx, cluster.CAName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.CAName, Namespace: in.ns, Labels: in.labels("registry")},
		Data:       map[string]string{cluster.CAKey: string(in.opts.S3.CABundle)},
	}
	cur, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	case err == nil:
		cur.Data = cm.Data
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	return nil
}

// handOver gives the NodePort to the registry.
func (in *initRun) handOver(ctx context.Context) (string, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName, Namespace: in.ns, Labels: in.labels("registry")},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: in.labels("registry"),
			Ports: []corev1.ServicePort{{
				Name: "registry", Protocol: corev1.ProtocolTCP, Port: cluster.RegistryPort,
				TargetPort: intstr.FromString("registry"), NodePort: in.opts.NodePort,
			}},
		},
	}
	cur, err := in.cs.CoreV1().Services(in.ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err == nil && len(cur.Spec.Ports) == 1 && cur.Spec.Ports[0].NodePort == in.opts.NodePort && cur.Spec.Type == corev1.ServiceTypeNodePort {
		return "", nil
	}
	if err := DeleteInjector(ctx, in.cs, in.ns); err != nil {
		return "", err
	}
	if err := kube.DeleteAndWait(ctx, in.cs.CoreV1().Services(in.ns), cluster.RegistryName); err != nil {
		return "", err
	}
	if _, err := in.cs.CoreV1().Services(in.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create Service %s: %w", cluster.RegistryName, err)
	}
	return fmt.Sprintf("Service %s holds NodePort %d", cluster.RegistryName, in.opts.NodePort), nil
}

func (in *initRun) cleanUp(ctx context.Context) (string, error) {
	if err := DeleteInjector(ctx, in.cs, in.ns); err != nil {
		return "", err
	}
	return "no injector objects left", nil
}

// state records the registry for later commands (cluster.State).
func (in *initRun) state(ctx context.Context) (string, error) {
	st := cluster.State{
		Registry: in.res.Registry, Image: in.res.Image, Node: in.res.Node,
		PullSecret: cluster.PullSecretName, AuthSecret: cluster.AuthSecretName,
		Storage: in.res.Storage, Replicas: in.opts.Replicas,
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.StateName, Namespace: in.ns, Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy}},
		Data:       st.Data(),
	}
	if err := kube.ApplySecret(ctx, in.cs.CoreV1().Secrets(in.ns), s); err != nil {
		return "", err
	}
	return "Secret " + cluster.StateName, nil
}

// PushRegistryImage pushes the registry image for arch (the one Init
// injected: the same binary gives the same digest) into the registry at
// host, with the account Init made, and returns its manifest. Then a
// registry Pod made on any node (a replica rescheduled, a new one) pulls
// its image from the registry itself, served by the other replicas.
func PushRegistryImage(ctx context.Context, cs kubernetes.Interface, ns, host, binDir, arch string) (ocispec.Descriptor, error) {
	bin, err := LoadRegistry(binDir, arch)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	auth, err := cs.CoreV1().Secrets(ns).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("registry credentials: %w", err)
	}
	account := cluster.AccountFromData(auth.Data)
	repo, err := reach.RegistryRemote(host, orasauth.Credential{Username: account.Username, Password: account.Password}).Repository(host + "/" + RegistryRepository)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	var desc ocispec.Descriptor
	err = reach.Retry(ctx, 0, func() error {
		var err error
		desc, err = PushImage(ctx, repo, ImageOptions{Arch: arch, Binary: bin})
		return err
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push the registry's image: %w", err)
	}
	return desc, nil
}
