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
	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Names of what init leaves in the cluster, in its namespace.
const (
	RegistryName   = "ferry-registry"      // Deployment and NodePort Service
	AuthSecretName = "ferry-registry-auth" // username, password, htpasswd
	PullSecretName = "ferry-registry-pull" // dockerconfigjson for RegistryHost
	StateName      = "ferry-state"         // what init set up, for later commands
	// RegistryUser is the registry account init creates.
	RegistryUser = "ferry"
	// DefaultStorageDir is the registry's storage on its node (hostPath).
	DefaultStorageDir = "/var/lib/ferry/registry"
	// DefaultWaitTimeout bounds each waiting step of Init.
	DefaultWaitTimeout = 3 * time.Minute
)

// RegistryHost is where every node reaches the in-cluster registry.
func RegistryHost(nodePort int32) string { return "127.0.0.1:" + strconv.Itoa(int(nodePort)) }

// RegistryFileName is the file name of the in-cluster registry binary for
// goarch, as `make build` writes it into bin/ beside ferry.
func RegistryFileName(goarch string) string { return "ferry-registry-linux-" + goarch }

// InitOptions configure Init. Zero values take the documented defaults.
type InitOptions struct {
	// Namespace for everything; DefaultNamespace if empty.
	Namespace string
	// BinDir holds the stage-1 injectors and the registry binaries per
	// architecture (Stage1FileName, RegistryFileName). Required.
	BinDir string
	// NodePort is where the registry answers on every node; DefaultNodePort if 0.
	NodePort int32
	// ChunkSize of the injector's ConfigMaps; DefaultChunkSize if ≤ 0.
	ChunkSize int
	// StorageDir is the registry storage on its node; DefaultStorageDir if empty.
	StorageDir string
	// WaitTimeout bounds each step that waits on the cluster;
	// DefaultWaitTimeout if 0.
	WaitTimeout time.Duration
	// Ferry is the ferry executable the agent's image is built from when
	// it is a static linux executable for the node's architecture;
	// BinDir/ferry if empty. Otherwise BinDir/AgentFileName(arch) is used.
	Ferry string
	// AgentRequireKnown makes the agent refuse Pods with an image in no
	// deployed package (`ferry agent --require-known`).
	AgentRequireKnown bool
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
	// Agent is the agent's image, by digest, in the registry.
	Agent string `json:"agent"`
}

// StepError says which step of Init failed.
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
// which then takes over the NodePort; the injector's objects are deleted.
// Then the agent, the admission webhook that sends every Pod to the
// registry by digest, is built from the ferry binary, pushed, deployed and
// registered (see AgentName). A second run finds the registry running its
// image and only repairs what is missing (credentials, Service, leftovers,
// the agent's objects).
func Init(ctx context.Context, cs kubernetes.Interface, opts InitOptions) (*InitResult, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.NodePort == 0 {
		opts.NodePort = DefaultNodePort
	}
	if opts.StorageDir == "" {
		opts.StorageDir = DefaultStorageDir
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	in := &initRun{cs: cs, opts: opts, ns: opts.Namespace, res: &InitResult{Registry: RegistryHost(opts.NodePort)}}
	steps := []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{"namespace", in.namespace},
		{"credentials", in.credentials},
		{"node", in.node},
		{"registry image", in.image},
		{"check registry", in.check},
		{"injector", in.injector},
		{"registry", in.registry},
		{"hand-over", in.handOver},
		{"clean-up", in.cleanUp},
		{"state", in.state},
		{"agent", in.agent},
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
	cred     auth.Credential // the registry account
	nsUID    types.UID       // of the namespace, owner of the cluster-wide objects
	payload  Payload
	healthy  bool // the registry already runs the right image
}

func (in *initRun) labels(component string) map[string]string {
	return map[string]string{LabelName: RegistryName, LabelManagedBy: "ferry", LabelComponent: component}
}

func (in *initRun) namespace(ctx context.Context) (string, error) {
	ns, err := in.cs.CoreV1().Namespaces().Get(ctx, in.ns, metav1.GetOptions{})
	if err == nil {
		in.nsUID = ns.UID
		return "exists", nil
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	ns, err = in.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.ns, Labels: map[string]string{LabelManagedBy: "ferry"}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	in.nsUID = ns.UID
	return "created " + in.ns, nil
}

// credentials makes the registry account once and keeps it: a generated
// password, its htpasswd line, and a pull secret for RegistryHost.
func (in *initRun) credentials(ctx context.Context) (string, error) {
	secrets := in.cs.CoreV1().Secrets(in.ns)
	auth, err := secrets.Get(ctx, AuthSecretName, metav1.GetOptions{})
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
		auth = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: AuthSecretName, Namespace: in.ns, Labels: in.labels("registry")},
			Data: map[string][]byte{
				"username": []byte(RegistryUser), "password": []byte(password),
				"htpasswd": []byte(RegistryUser + ":" + string(hash) + "\n"),
			},
		}
		if auth, err = secrets.Create(ctx, auth, metav1.CreateOptions{}); err != nil {
			return "", err
		}
		detail = "generated"
	} else if err != nil {
		return "", err
	}
	in.htpasswd = auth.Data["htpasswd"]
	user, pass := string(auth.Data["username"]), string(auth.Data["password"])
	in.cred.Username, in.cred.Password = user, pass
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{in.res.Registry: map[string]string{
		"username": user, "password": pass, "auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass)),
	}}})
	if err != nil {
		return "", err
	}
	pull := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: PullSecretName, Namespace: in.ns, Labels: in.labels("registry")},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	if err := apply(ctx, secrets, pull); err != nil {
		return "", err
	}
	return detail + " (user " + user + ", secrets " + AuthSecretName + ", " + PullSecretName + ")", nil
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
	if d, err := in.cs.AppsV1().Deployments(in.ns).Get(ctx, RegistryName, metav1.GetOptions{}); err == nil {
		want = d.Spec.Template.Spec.NodeName
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	var node *corev1.Node
	for i, n := range nodes.Items {
		if !nodeReady(&n) {
			continue
		}
		if node == nil || n.Name == want {
			node = &nodes.Items[i]
		}
	}
	if node == nil {
		return "", fmt.Errorf("no Ready node among %d", len(nodes.Items))
	}
	in.res.Node, in.arch = node.Name, node.Status.NodeInfo.Architecture
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
	dir, err := os.MkdirTemp("", "ferry-registry-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
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
	d, err := in.cs.AppsV1().Deployments(in.ns).Get(ctx, RegistryName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "no registry yet", nil
	case err != nil:
		return "", err
	}
	if d.Spec.Template.Spec.Containers[0].Image != in.res.Image {
		return "registry runs another image; injecting", nil
	}
	// Ready, or a restart whose image is on its node already.
	if err := waitPods(ctx, in.cs, in.ns, in.labels("registry"), 30*time.Second, nil); err != nil {
		return "registry not ready (" + err.Error() + "); injecting", nil
	}
	in.healthy = true
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
	if err := deleteAndWait(ctx, in.cs.CoreV1().Services(in.ns), RegistryName); err != nil {
		return "", err
	}
	if err := RunInjector(ctx, in.cs, plan, in.opts.WaitTimeout); err != nil {
		return "", err
	}
	// The registry's pod pulls through the NodePort: wait until it leads
	// to the injector (anonymous reads allowed: 200).
	if err := waitNodePort(ctx, RegistryHost(in.opts.NodePort), http.StatusOK, "the injector", in.opts.WaitTimeout); err != nil {
		return "", err
	}
	return fmt.Sprintf("serving on NodePort %d from %d ConfigMaps (%d payload chunks, %d stage-1 chunks)", in.opts.NodePort, len(plan.ConfigMaps), plan.PayloadChunks, plan.Stage1Chunks), nil
}

// RunInjector creates a plan's objects (replacing leftovers of an earlier
// run) and waits until the injector Pod is Ready. A crash of the injector
// (a damaged chunk, a digest mismatch) fails at once with its message.
func RunInjector(ctx context.Context, cs kubernetes.Interface, plan *Plan, timeout time.Duration) error {
	ns := plan.Pod.Namespace
	if err := DeleteInjector(ctx, cs, ns); err != nil {
		return err
	}
	for i := range plan.ConfigMaps {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &plan.ConfigMaps[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ConfigMap %s: %w", plan.ConfigMaps[i].Name, err)
		}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &plan.Pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Pod %s: %w", plan.Pod.Name, err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &plan.Service, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Service %s: %w", plan.Service.Name, err)
	}
	return waitPods(ctx, cs, ns, plan.Pod.Labels, timeout, crashed)
}

// DeleteInjector deletes every injector object in ns and waits until they are gone.
func DeleteInjector(ctx context.Context, cs kubernetes.Interface, ns string) error {
	sel := labels.SelectorFromSet(map[string]string{LabelManagedBy: "ferry", LabelComponent: "injector"}).String()
	bg := metav1.DeletePropagationBackground
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	for _, s := range svcs.Items { // Services have no DeleteCollection
		if err := cs.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	grace := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &bg}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := cs.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll(ctx, 2*time.Minute, func() (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		return len(pods.Items)+len(svcs.Items)+len(cms.Items) == 0, nil
	}, "injector objects still there")
}

// registry applies the registry Deployment and waits for its pod, whose
// image comes through the injector's NodePort, by digest.
func (in *initRun) registry(ctx context.Context) (string, error) {
	if in.healthy {
		return "", nil
	}
	if err := applyDeployment(ctx, in.cs, in.registryDeployment()); err != nil {
		return "", err
	}
	start := time.Now()
	// The rollout, not any Ready pod: the old one may still be Ready.
	if err := waitRollout(ctx, in.cs, in.ns, RegistryName, in.opts.WaitTimeout); err != nil {
		return "", err
	}
	return fmt.Sprintf("Deployment %s ready, image pulled by digest through %s in %.1fs", RegistryName, in.res.Registry, time.Since(start).Seconds()), nil
}

func (in *initRun) registryDeployment() *appsv1.Deployment {
	l := in.labels("registry")
	f := false
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: RegistryName, Namespace: in.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{
					NodeName:                     in.res.Node, // its storage is on that node
					AutomountServiceAccountToken: &f,
					EnableServiceLinks:           &f,
					SecurityContext:              &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:            "registry",
						Image:           in.res.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args:            []string{"--addr", ":" + strconv.Itoa(DefaultPort), "--root", "/var/lib/registry", "--htpasswd", "/auth/htpasswd"},
						Ports:           []corev1.ContainerPort{{Name: "registry", ContainerPort: DefaultPort, Protocol: corev1.ProtocolTCP}},
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
							{Name: "storage", MountPath: "/var/lib/registry"},
							{Name: "auth", MountPath: "/auth", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "storage", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: in.opts.StorageDir, Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
						{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: AuthSecretName, Items: []corev1.KeyToPath{{Key: "htpasswd", Path: "htpasswd"}}}}},
					},
				},
			},
		},
	}
}

// handOver gives the NodePort to the registry.
func (in *initRun) handOver(ctx context.Context) (string, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: RegistryName, Namespace: in.ns, Labels: in.labels("registry")},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: in.labels("registry"),
			Ports: []corev1.ServicePort{{
				Name: "registry", Protocol: corev1.ProtocolTCP, Port: DefaultPort,
				TargetPort: intstr.FromString("registry"), NodePort: in.opts.NodePort,
			}},
		},
	}
	cur, err := in.cs.CoreV1().Services(in.ns).Get(ctx, RegistryName, metav1.GetOptions{})
	if err == nil && len(cur.Spec.Ports) == 1 && cur.Spec.Ports[0].NodePort == in.opts.NodePort && cur.Spec.Type == corev1.ServiceTypeNodePort {
		return "", nil
	}
	if err := DeleteInjector(ctx, in.cs, in.ns); err != nil {
		return "", err
	}
	if err := deleteAndWait(ctx, in.cs.CoreV1().Services(in.ns), RegistryName); err != nil {
		return "", err
	}
	if _, err := in.cs.CoreV1().Services(in.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create Service %s: %w", RegistryName, err)
	}
	return fmt.Sprintf("Service %s holds NodePort %d", RegistryName, in.opts.NodePort), nil
}

func (in *initRun) cleanUp(ctx context.Context) (string, error) {
	if err := DeleteInjector(ctx, in.cs, in.ns); err != nil {
		return "", err
	}
	return "no injector objects left", nil
}

func (in *initRun) state(ctx context.Context) (string, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: StateName, Namespace: in.ns, Labels: map[string]string{LabelManagedBy: "ferry"}},
		Data: map[string][]byte{
			"registry": []byte(in.res.Registry), "image": []byte(in.res.Image), "node": []byte(in.res.Node),
			"pullSecret": []byte(PullSecretName), "authSecret": []byte(AuthSecretName),
		},
	}
	if err := apply(ctx, in.cs.CoreV1().Secrets(in.ns), s); err != nil {
		return "", err
	}
	return "Secret " + StateName, nil
}

// secretClient is the part of the Secrets client apply needs.
type secretClient interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Secret, error)
	Create(context.Context, *corev1.Secret, metav1.CreateOptions) (*corev1.Secret, error)
	Update(context.Context, *corev1.Secret, metav1.UpdateOptions) (*corev1.Secret, error)
}

// apply creates s or updates it in place.
func apply(ctx context.Context, c secretClient, s *corev1.Secret) error {
	cur, err := c.Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, s, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cur.Data, cur.Type, cur.Labels = s.Data, s.Type, s.Labels
	_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

func applyDeployment(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) error {
	c := cs.AppsV1().Deployments(d.Namespace)
	cur, err := c.Get(ctx, d.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, d, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cur.Spec, cur.Labels = d.Spec, d.Labels
	_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// deleteAndWait deletes the named object (if any) and waits until it is gone.
func deleteAndWait[T any](ctx context.Context, c interface {
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, name string) error {
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll(ctx, time.Minute, func() (bool, error) {
		_, err := c.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}, name+" still there")
}

// errTimedOut is wrapped by poll's error when the time is up.
var errTimedOut = errors.New("timed out")

// poll calls cond every half second until it is true, fails, or timeout.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error), what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %s: %s", errTimedOut, timeout, what)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// crashed reports a container that ended in failure, for a fast error.
func crashed(p *corev1.Pod) error {
	for _, c := range p.Status.ContainerStatuses {
		for _, st := range []corev1.ContainerState{c.State, c.LastTerminationState} {
			if t := st.Terminated; t != nil && t.ExitCode != 0 {
				return fmt.Errorf("container %s exited with status %d: %s", c.Name, t.ExitCode, oneLine(t.Message))
			}
		}
	}
	return nil
}

// waitPods waits until a pod matching sel is Ready. On a timeout, or when
// fail reports an error, the error tells the pod's state and last events.
func waitPods(ctx context.Context, cs kubernetes.Interface, ns string, sel map[string]string, timeout time.Duration, fail func(*corev1.Pod) error) error {
	selector := labels.SelectorFromSet(sel).String()
	var last *corev1.Pod
	err := poll(ctx, timeout, func() (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			last = p
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			if fail != nil {
				if err := fail(p); err != nil {
					return false, fmt.Errorf("pod %s: %w%s", p.Name, err, events(ctx, cs, p))
				}
			}
		}
		return false, nil
	}, "no Ready pod "+selector)
	if errors.Is(err, errTimedOut) && last != nil {
		err = fmt.Errorf("%w; pod %s: %s%s", err, last.Name, podState(last), events(ctx, cs, last))
	}
	return err
}

// podState summarises why a pod is not Ready.
func podState(p *corev1.Pod) string {
	parts := []string{string(p.Status.Phase)}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", c.Name, c.State.Waiting.Reason, oneLine(c.State.Waiting.Message)))
		case c.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("%s terminated: %d %s", c.Name, c.State.Terminated.ExitCode, oneLine(c.State.Terminated.Message)))
		}
	}
	return strings.Join(parts, ", ")
}

// events lists a pod's last few events, for error messages.
func events(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	list, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.SelectorFromSet(fields.Set{"involvedObject.name": p.Name}).String(),
	})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
	if len(items) > 4 {
		items = items[len(items)-4:]
	}
	var msgs []string
	for _, e := range items {
		msgs = append(msgs, e.Reason+": "+oneLine(e.Message))
	}
	return "; events: " + strings.Join(msgs, " | ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
