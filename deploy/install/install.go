package install

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// The agent's objects in the cluster, as Install makes them.
const (
	// Name names the agent's Deployment, Service, ServiceAccount, Role and
	// RoleBinding in ferry's namespace, and, for the default namespace, its
	// ClusterRole, ClusterRoleBinding and MutatingWebhookConfiguration.
	Name = cluster.AgentName
	// TLSSecretName holds the agent's CA (ca.crt) and serving certificate
	// and key (tls.crt, tls.key), generated once by Install.
	TLSSecretName = cluster.AgentTLSSecretName
	// CAConfigMap holds the agent's CA certificate (key cluster.AgentCAKey),
	// public, for clients of its upload endpoint that cannot read
	// TLSSecretName.
	CAConfigMap = cluster.AgentCAConfigMap
	// Repository is where Install pushes the agent's image.
	Repository = "ferry/agent"
	// UploadDir is where the agent spools uploaded packages (an emptyDir).
	UploadDir = "/var/lib/ferry/uploads"
	// BinaryPath is where the ferry binary sits in the agent's image.
	BinaryPath = "/ferry"
	// Port is the agent's HTTPS port (DefaultAddr); its Service answers on 443.
	Port = cluster.AgentPort
	// IgnoreLabel set to IgnoreValue on a namespace keeps the agent away
	// from its Pods: their images are neither rewritten nor refused
	// (kubectl label namespace NAME ferry.dev/agent=ignore).
	IgnoreLabel = "ferry.dev/agent"
	// IgnoreValue is the value of IgnoreLabel that means ignore.
	IgnoreValue = "ignore"
	// SystemNamespace is left alone too, like ferry's own namespace: the
	// cluster's own Pods (network, DNS) must start when the agent cannot,
	// or the agent could never start again.
	SystemNamespace = "kube-system"
	// DefaultWaitTimeout bounds each waiting step of Install.
	DefaultWaitTimeout = 3 * time.Minute
	// tlsAnnotation on the agent's pod template rolls its pods when the
	// certificate changes.
	tlsAnnotation = "ferry.dev/tls-sha256"
)

// clusterName names the agent's cluster-wide objects: Name for the default
// namespace, with the namespace appended for another.
func clusterName(ns string) string { return cluster.AgentWebhookName(ns) }

func labels() map[string]string { return cluster.AgentLabels() }

// InstallOptions configure Install. Zero values take the documented defaults.
type InstallOptions struct {
	// Namespace is ferry's namespace, where ferry init set up the registry;
	// cluster.DefaultNamespace if empty.
	Namespace string
	// Ferry is the ferry executable the agent's image is built from when
	// it is a static linux executable for the node's architecture;
	// BinDir/ferry if empty. Otherwise BinDir/BinaryFileName(arch) is used
	// (see FindBinary).
	Ferry, BinDir string
	// RequireKnown makes the agent refuse Pods with an image in no
	// deployed package (`ferry agent --require-known`).
	RequireKnown bool
	// WaitTimeout bounds each step that waits on the cluster;
	// DefaultWaitTimeout if 0.
	WaitTimeout time.Duration
	// Registry is where this process reaches the in-cluster registry to
	// push the agent's image (host:port, e.g. a tunnel's local address);
	// the registry's address on the nodes if empty.
	Registry string
	// Extensions applies the Package CustomResourceDefinition; required.
	Extensions apiextensionsclient.Interface
	// ControllerResync is how often the Package controller checks an
	// unchanged Package again (`ferry controller --resync`); its default
	// if 0.
	ControllerResync time.Duration
	// ControllerDriftCheck is how often the Package controller installs an
	// unchanged Package again, putting back what was changed or deleted
	// behind its back (`ferry controller --drift-check`); its default if 0.
	ControllerDriftCheck time.Duration
	// Certificates are the agent's certificates' validity and renewal:
	// init replaces those that cannot serve, the Package controller
	// rotates them before they expire (`ferry controller
	// --cert-validity`, `--cert-renew-before`); the defaults if zero.
	Certificates servingcert.Options

	// imagePushed, if set, is called once the agent's image is in the
	// registry (Init then pushes the registry's own image: not beside the
	// agent's, which the rollout waits for).
	imagePushed func()
	// beforePush, if set, is waited for before the agent's image is
	// pushed: Init's early push of the same image, to the registry Pod
	// during the hand-over, after which this push finds it there.
	beforePush func(context.Context)
	// prepared, if set, gives what Prepare made meanwhile (Init runs it
	// beside the registry's bootstrap); Install then makes none of it.
	prepared func(context.Context) (*Prepared, error)
}

// InstallResult tells what Install did.
type InstallResult struct {
	// Image is the agent's image, by digest, in the registry.
	Image string
	// Binary is the ferry binary the image was built from; Pushed how long
	// building and pushing the image took (nothing when the registry has
	// it).
	Binary string
	Pushed time.Duration
	// Ready is how long the Deployment took to roll out.
	Ready time.Duration
	// Renewed says the certificates were generated, not kept; Replaced
	// says why.
	Renewed  bool
	Replaced string
	// Webhook names the MutatingWebhookConfiguration.
	Webhook string
	// Check tells whether the API server calls the agent: "answering the
	// API server (…s)", or why it was not checked.
	Check string
	// Controller is how long the Package controller's Deployment took to
	// roll out.
	Controller time.Duration
	// Git is the in-cluster git server's URL as Pods reach it; GitReady
	// how long its Deployment took to roll out.
	Git      string
	GitReady time.Duration
	// Phases is where Install's time went, in order.
	Phases []Phase
}

// Phase is one part of Install and how long it took.
type Phase struct {
	Name string
	Took time.Duration
}

// Profile is Phases on one line: "image 0.6s, certificates 0.1s, …".
func (r *InstallResult) Profile() string {
	parts := make([]string, len(r.Phases))
	for i, p := range r.Phases {
		parts[i] = fmt.Sprintf("%s %.1fs", p.Name, p.Took.Seconds())
	}
	return strings.Join(parts, ", ")
}

// String is the one-line account of Install that ferry init prints.
func (r *InstallResult) String() string {
	certs := "certificates kept"
	if r.Renewed {
		certs = "certificates generated (" + r.Replaced + ")"
	}
	return fmt.Sprintf("%s (from %s, pushed in %.1fs); Deployment %s ready in %.1fs; %s; webhook %s, failurePolicy Fail: %s; CRD %s, Deployment %s ready in %.1fs; git server %s ready in %.1fs",
		r.Image, r.Binary, r.Pushed.Seconds(), Name, r.Ready.Seconds(), certs, r.Webhook, r.Check, v1alpha1.CRDName, cluster.ControllerName, r.Controller.Seconds(), r.Git, r.GitReady.Seconds())
}

// Install puts the agent in place next to the registry that ferry init set
// up in opts.Namespace, and checks that the API server calls it: its image
// (ferry's binary, pushed to the registry, for the architecture of the
// registry's node), certificates, RBAC, Deployment, Service, then the
// MutatingWebhookConfiguration once it is Ready. Its cluster-wide objects
// are owned by ferry's namespace. Run again, it changes nothing that is
// right.
func Install(ctx context.Context, cs kubernetes.Interface, opts InstallOptions) (*InstallResult, error) {
	in, err := newInstaller(ctx, cs, opts)
	if err != nil {
		return nil, err
	}
	state, account, err := cluster.ReadRegistry(ctx, cs.CoreV1().Secrets(in.ns))
	if err != nil {
		return nil, err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, state.Node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the registry's node: %w", err)
	}
	in.registry, in.arch = state.Registry, node.Status.NodeInfo.Architecture
	in.push = in.registry
	if opts.Registry != "" {
		in.push = opts.Registry
	}
	return in.install(ctx, auth.Credential{Username: account.Username, Password: account.Password})
}

type installer struct {
	cs       kubernetes.Interface
	opts     InstallOptions
	ns       string
	registry string // host:port on every node
	push     string // host:port for this process
	arch     string // the registry's node's
	image    string // the agent's, by digest
	owner    []metav1.OwnerReference
}

func (in *installer) install(ctx context.Context, cred auth.Credential) (*InstallResult, error) {
	var phases []Phase
	mark := time.Now()
	lap := func(name string) time.Duration {
		now := time.Now()
		phases = append(phases, Phase{Name: name, Took: now.Sub(mark)})
		mark = now
		return phases[len(phases)-1].Took
	}
	path, err := FindBinary(in.opts.Ferry, in.opts.BinDir, in.arch)
	if err != nil {
		return nil, err
	}
	if err := reach.WaitRegistry(ctx, in.push, in.opts.WaitTimeout); err != nil {
		return nil, err
	}
	repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(in.push, cred), Client: reach.RegistryClient()}.Repository(in.push + "/" + Repository)
	if err != nil {
		return nil, err
	}
	lap("registry reached")
	// The image is pushed while the certificates and the objects that do
	// not name it are made; if those fail, the push is not waited for.
	var (
		desc    ocispec.Descriptor
		pushErr error
		pushed  time.Duration
		pushing sync.WaitGroup
	)
	pushCtx, cancelPush := context.WithCancel(ctx)
	defer cancelPush()
	pushing.Go(func() {
		start := time.Now()
		if in.opts.beforePush != nil {
			in.opts.beforePush(pushCtx)
		}
		pushErr = reach.Retry(pushCtx, 0, func() error {
			var err error
			desc, err = pushAgentImage(pushCtx, repo, path, in.arch)
			return err
		})
		pushed = time.Since(start)
		if pushErr == nil && in.opts.imagePushed != nil {
			in.opts.imagePushed()
		}
	})
	prepare := in.prepare
	if in.opts.prepared != nil {
		prepare = in.opts.prepared
	}
	prep, err := prepare(ctx)
	lap("certificates and objects")
	if err != nil {
		cancelPush()
		pushing.Wait()
		return nil, err
	}
	pushing.Wait()
	if pushErr != nil {
		return nil, fmt.Errorf("push the agent's image (from %s): %w", path, pushErr)
	}
	certs := prep.certs
	in.image = in.registry + "/" + Repository + "@" + desc.Digest.String()
	lap("image")
	sum := sha256.Sum256(certs.Cert)
	if err := kube.ApplyDeployment(ctx, in.cs, in.deployment(hex.EncodeToString(sum[:8]))); err != nil {
		return nil, err
	}
	// The git server and the Package controller do not need the agent (the
	// webhook leaves ferry's namespace alone): they start and are waited
	// for while the agent rolls out.
	var (
		wg                 sync.WaitGroup
		git                string
		gitReady, ctlReady time.Duration
		gitErr, ctlErr     error
	)
	sideCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		git, gitReady, gitErr = in.gitServer(sideCtx, cluster.Account{Username: cred.Username, Password: cred.Password})
	})
	wg.Go(func() { ctlReady, ctlErr = in.controller(sideCtx) })
	lap("objects")

	start := time.Now()
	// An agent Pod on a node that is down is never replaced otherwise.
	if _, err := kube.DeletePodsOnDeadNodes(ctx, in.cs, in.ns, labels()); err != nil {
		return nil, err
	}
	stop := kube.Tend(ctx, in.cs, in.ns, labels())
	err = kube.WaitRollout(ctx, in.cs, in.ns, Name, in.opts.WaitTimeout)
	stop()
	if err != nil {
		return nil, err
	}
	ready := time.Since(start)
	lap("rollout")
	if err := in.webhook(ctx, certs.Bundle); err != nil {
		return nil, err
	}
	lap("webhook")
	check, err := in.check(ctx)
	if err != nil {
		return nil, err
	}
	lap("check")
	wg.Wait()
	if err := errors.Join(gitErr, ctlErr); err != nil {
		return nil, err
	}
	lap("controller and git server")
	return &InstallResult{Controller: ctlReady, Image: in.image, Binary: path, Pushed: pushed, Ready: ready, Renewed: certs.Replaced != "", Replaced: certs.Replaced, Webhook: clusterName(in.ns), Check: check, Git: git, GitReady: gitReady, Phases: phases}, nil
}

// pushAgentImage pushes the agent's image, made of the ferry binary at
// path for arch, to repo.
func pushAgentImage(ctx context.Context, repo oras.Target, path, arch string) (ocispec.Descriptor, error) {
	return inject.PushImage(ctx, repo, inject.ImageOptions{Arch: arch, BinaryFile: path, Path: BinaryPath, Uncompressed: true})
}

// objects makes the agent's certificates (returned), its CA's ConfigMap,
// RBAC and Service: all but what names its image.
func (in *installer) objects(ctx context.Context) (servingcert.Ensured, error) {
	certs, err := in.tls(ctx)
	if err != nil {
		return certs, err
	}
	if err := kube.Upsert(ctx, in.cs.CoreV1().ConfigMaps(in.ns), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: CAConfigMap, Namespace: in.ns, Labels: labels()},
		Data:       map[string]string{cluster.AgentCAKey: string(certs.Bundle)},
	}, func(cur, want *corev1.ConfigMap) {
		// Trust is added, never taken: the controller trims the bundle.
		bundle := servingcert.Union([]byte(cur.Data[cluster.AgentCAKey]), []byte(want.Data[cluster.AgentCAKey]), time.Now())
		cur.Labels, cur.Data = want.Labels, map[string]string{cluster.AgentCAKey: string(bundle)}
	}); err != nil {
		return certs, err
	}
	if err := in.rbac(ctx); err != nil {
		return certs, err
	}
	if err := in.budget(ctx); err != nil {
		return certs, err
	}
	return certs, in.service(ctx)
}

// rbac lets the agent read ferry's namespace's Secrets (the deployed
// packages' records, the pull secret, the trusted keys) and copy the pull
// secret into other namespaces: create any Secret, get and update only
// those of its name. For uploads, it reads the registry's Service, creates
// and updates Packages in ferry's namespace, and reviews its callers'
// tokens and permissions (TokenReview, SubjectAccessReview). As a fleet
// member, it updates its Secret (member.SecretName) in ferry's namespace
// and deletes the Packages no placement wants any more.
func (in *installer) rbac(ctx context.Context) error {
	l := labels()
	meta := metav1.ObjectMeta{Name: Name, Namespace: in.ns, Labels: l}
	wide := metav1.ObjectMeta{Name: clusterName(in.ns), Labels: l, OwnerReferences: in.owner}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: Name, Namespace: in.ns}}
	rbac := in.cs.RbacV1()
	if err := kube.Upsert(ctx, in.cs.CoreV1().ServiceAccounts(in.ns), &corev1.ServiceAccount{ObjectMeta: meta},
		func(cur, want *corev1.ServiceAccount) { cur.Labels = want.Labels }); err != nil {
		return err
	}
	if err := kube.Upsert(ctx, rbac.Roles(in.ns), &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: []string{cluster.RegistryName, GitName}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{member.SecretName}, Verbs: []string{"update"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"packages"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	}}, func(cur, want *rbacv1.Role) { cur.Labels, cur.Rules = want.Labels, want.Rules }); err != nil {
		return err
	}
	if err := kube.Upsert(ctx, rbac.RoleBindings(in.ns), &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: Name},
	}, func(cur, want *rbacv1.RoleBinding) { cur.Labels, cur.Subjects = want.Labels, want.Subjects }); err != nil {
		return err
	}
	if err := kube.Upsert(ctx, rbac.ClusterRoles(), &rbacv1.ClusterRole{ObjectMeta: wide, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{cluster.PullSecretName, GitSecretName, GitCredsSecretName, SourceRegistrySecretName}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}}, func(cur, want *rbacv1.ClusterRole) {
		cur.Labels, cur.OwnerReferences, cur.Rules = want.Labels, want.OwnerReferences, want.Rules
	}); err != nil {
		return err
	}
	return kube.Upsert(ctx, rbac.ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{ObjectMeta: wide, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: wide.Name},
	}, func(cur, want *rbacv1.ClusterRoleBinding) {
		cur.Labels, cur.OwnerReferences, cur.Subjects = want.Labels, want.OwnerReferences, want.Subjects
	})
}

func (in *installer) service(ctx context.Context) error {
	return in.applyService(ctx, Name, labels(), "https", 443)
}

// applyService makes or mends Service name of ferry's namespace: a cluster
// IP, port to the Pods' port named portName, for the Pods labelled l.
func (in *installer) applyService(ctx context.Context, name string, l map[string]string, portName string, port int32) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: in.ns, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: l,
			Ports:    []corev1.ServicePort{{Name: portName, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromString(portName)}},
		},
	}
	return kube.Upsert(ctx, in.cs.CoreV1().Services(in.ns), svc, func(cur, want *corev1.Service) {
		cur.Labels, cur.Spec.Selector, cur.Spec.Ports = want.Labels, want.Spec.Selector, want.Spec.Ports
	})
}

func (in *installer) deployment(tlsSum string) *appsv1.Deployment {
	l := labels()
	args := []string{
		"agent", "--addr=:" + strconv.Itoa(Port), "--namespace=" + in.ns,
		"--tls-cert=/tls/" + corev1.TLSCertKey, "--tls-key=/tls/" + corev1.TLSPrivateKeyKey, "--tls-secret=" + TLSSecretName,
		"--registry=" + in.registry, "--pull-secret=" + cluster.PullSecretName,
		"--upload-dir=" + UploadDir,
	}
	if in.opts.RequireKnown {
		args = append(args, "--require-known")
	}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: in.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(AgentReplicas)),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			// A new pod is Ready before the old one goes: the webhook
			// fails closed, so it must never lack an endpoint.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: map[string]string{tlsAnnotation: tlsSum}},
				Spec: in.podSpec(Name, corev1.Container{
					Name:  "agent",
					Args:  args,
					Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: Port, Protocol: corev1.ProtocolTCP}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: cluster.AgentPathHealth, Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
						PeriodSeconds: 1, // init waits for it
					},
					// The kubelet probes once at "running", which it reports
					// after this hook: the agent answers by then.
					Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
						Command: []string{BinaryPath, "agent-probe", "--addr", "127.0.0.1:" + strconv.Itoa(Port), "--wait", "10s"},
					}}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
					}},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "tls", MountPath: "/tls", ReadOnly: true},
						{Name: "uploads", MountPath: UploadDir},
					},
				}, []corev1.Volume{
					{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName:  TLSSecretName,
						Items:       []corev1.KeyToPath{{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey}, {Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey}},
						DefaultMode: ptr(int32(0o440)),
					}}},
					// Uploads are spooled here (the node's disk) while
					// they are verified and pushed, then deleted.
					{Name: "uploads", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				}),
			},
		},
	}
	d.Spec.Template.Spec.Affinity = agentSpread()
	return d
}

// podSpec runs c from ferry's image (the agent's) as ServiceAccount sa,
// on a node of the registry node's architecture, with the registry's pull
// secret, no service links, and the restricted security contexts.
func (in *installer) podSpec(sa string, c corev1.Container, volumes []corev1.Volume) corev1.PodSpec {
	c.Image, c.ImagePullPolicy, c.Command = in.image, corev1.PullIfNotPresent, []string{BinaryPath}
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	c.SecurityContext = containerSecurity()
	return corev1.PodSpec{
		ServiceAccountName: sa,
		EnableServiceLinks: ptr(false),
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: cluster.PullSecretName}},
		NodeSelector:       map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: in.arch},
		SecurityContext:    podSecurity(),
		Containers:         []corev1.Container{c},
		Volumes:            volumes,
	}
}

// withGrace is s with a termination grace period of seconds.
func withGrace(seconds int64, s corev1.PodSpec) corev1.PodSpec {
	s.TerminationGracePeriodSeconds = &seconds
	return s
}

func ptr[T any](v T) *T { return &v }

// podSecurity is the security context of ferry's Pods: not root, the
// runtime's seccomp profile.
func podSecurity() *corev1.PodSecurityContext {
	user := int64(65532)
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr(true), RunAsUser: &user, RunAsGroup: &user, FSGroup: &user,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurity is the security context of ferry's containers: no
// privilege, no capability, a read-only root.
func containerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false),
		Privileged:               ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
