package inject

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	orasauth "oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/scratch"
)

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
	if running := d.Spec.Template.Spec.Containers[0].Image; running != in.res.Image {
		if in.migrate == nil && in.canRoll(ctx, d) {
			in.rolling = true
			return "registry runs " + running + "; replacing it in place", nil
		}
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
	if in.healthy || in.rolling {
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
	t0 := time.Now()
	deleted, err := createInjector(ctx, in.cs, plan)
	if err != nil {
		return "", err
	}
	t1 := time.Now()
	// The registry's pod pulls through the NodePort: on a node, wait until
	// it leads to the injector (anonymous reads allowed: 200) — a pull
	// before kube-proxy routes it is refused, and its Pod replaced (a
	// second lost). Its Service leads there before the Pod is Ready, so
	// the answer is the wait, not Ready and then kube-proxy. Elsewhere, the
	// Pod Ready; the registry step restarts a pull that came too early.
	onNode := in.opts.Via == reach.NodePort || !in.opts.Via.Tunnels() && kubeletHere()
	wait := handOverWait
	if in.opts.Via == reach.NodePort {
		wait = in.opts.WaitTimeout
	}
	led, err := in.waitInjector(ctx, plan.Pod.Labels, onNode, wait)
	if err != nil {
		return "", err
	}
	how := "Pod Ready"
	if led {
		how = "answering through the NodePort here"
	}
	return fmt.Sprintf("serving on NodePort %d from %d ConfigMaps (%d payload chunks, %d stage-1 chunks; leftovers deleted %.1fs, objects created %.1fs, %s %.1fs)",
		in.opts.NodePort, len(plan.ConfigMaps), plan.PayloadChunks, plan.Stage1Chunks, deleted.Seconds(), (t1.Sub(t0) - deleted).Seconds(), how, time.Since(t1).Seconds()), nil
}

// waitInjector waits until the injector's Pod answers through the NodePort
// here (onNode; at most wait, best effort unless --registry-via nodeport),
// or else is Ready, and says whether the NodePort answered. A crash of the
// Pod (a chunk refused) ends the wait with its error.
func (in *initRun) waitInjector(ctx context.Context, sel map[string]string, onNode bool, wait time.Duration) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- kube.WaitPodReady(ctx, in.cs, in.ns, sel, in.opts.WaitTimeout, kube.Crashed) }()
	if !onNode {
		return false, <-ready
	}
	type answer struct {
		led bool
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		led, err := in.waitNodePort(ctx, true, http.StatusOK, "the injector", wait)
		answered <- answer{led, err}
	}()
	for {
		select {
		case err := <-ready:
			if err != nil {
				return false, err
			}
			ready = nil // Ready: the NodePort is still waited for
		case a := <-answered:
			if a.err != nil || a.led {
				return a.led, a.err
			}
			// The NodePort never answered (best effort): Ready will do.
			if ready == nil {
				return false, nil
			}
			return false, <-ready
		}
	}
}

// registry applies the registry Deployment and waits for its pod, whose
// image comes through the injector's NodePort, by digest.
func (in *initRun) registry(ctx context.Context) (string, error) {
	if err := in.storageObjects(ctx); err != nil {
		return "", err
	}
	if in.rolling {
		return in.roll(ctx)
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
		Args:            []string{"--addr", ":" + strconv.Itoa(cluster.RegistryPort), "--root", cluster.RegistryRoot, "--htpasswd", "/auth/" + cluster.HtpasswdKey, "--drain-delay", drainDelay.String()},
		Ports:           []corev1.ContainerPort{{Name: "registry", ContainerPort: cluster.RegistryPort, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("registry")}},
			PeriodSeconds: 1, // init waits for it; a TCP connection costs nothing
		},
		// The kubelet probes once at "running", which it reports after
		// this hook: the registry listens by then (`probe --wait`).
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{cluster.RegistryBinaryPath, "probe", "--addr", "127.0.0.1:" + strconv.Itoa(cluster.RegistryPort), "--wait", "10s"},
		}}},
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
		NodeName:                      in.res.Node, // its storage is on that node
		TerminationGracePeriodSeconds: ptr(int64((drainDelay + shutdownGrace).Seconds())),
		// A replacement in place pulls its image from the running
		// registry, with the account (the injector asks for none).
		ImagePullSecrets:             []corev1.LocalObjectReference{{Name: cluster.PullSecretName}},
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
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: withRevision(l, in.res.Image)}, Spec: spec},
		},
	}
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
	if err == nil && len(cur.Spec.Ports) == 1 && cur.Spec.Ports[0].NodePort == in.opts.NodePort && cur.Spec.Type == corev1.ServiceTypeNodePort &&
		maps.Equal(cur.Spec.Selector, svc.Spec.Selector) && !cur.Spec.PublishNotReadyAddresses {
		return "", nil
	}
	// This process runs on a node when the injector's NodePort answers
	// here (on a workstation nothing listens: refused at once).
	host := cluster.RegistryHost(in.opts.NodePort)
	onNode := in.opts.Via == reach.NodePort || !in.opts.Via.Tunnels() && listening(host)
	if err == nil && cur.Labels[cluster.LabelComponent] == "injector" && cur.Spec.Type == corev1.ServiceTypeNodePort {
		// The injector's: turned to the registry in place (its NodePort
		// and cluster IP kept). Its Pod and ConfigMaps go in the clean-up
		// that follows.
		cur.Labels, cur.Annotations = svc.Labels, nil
		cur.Spec.Selector, cur.Spec.Ports, cur.Spec.PublishNotReadyAddresses = svc.Spec.Selector, svc.Spec.Ports, false
		if _, err := in.cs.CoreV1().Services(in.ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("update Service %s: %w", cluster.RegistryName, err)
		}
	} else {
		// Anything else holding the NodePort goes first.
		if err := deleteInjectorServices(ctx, in.cs, in.ns); err != nil {
			return "", err
		}
		if err := kube.DeleteAndWait(ctx, in.cs.CoreV1().Services(in.ns), cluster.RegistryName); err != nil {
			return "", err
		}
		if _, err := in.cs.CoreV1().Services(in.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create Service %s: %w", cluster.RegistryName, err)
		}
	}
	if onNode && in.opts.RegistryReady != nil {
		if addr := in.readyRegistryPod(ctx); addr != "" {
			in.opts.RegistryReady(addr, in.arch)
		}
	}
	detail := fmt.Sprintf("Service %s holds NodePort %d", cluster.RegistryName, in.opts.NodePort)
	// kube-proxy takes a moment to lead the NodePort to the registry;
	// meanwhile a push would take a tunnel through the API server. The
	// registry asks anonymous callers for the account: 401.
	led, err := in.waitNodePort(ctx, onNode, http.StatusUnauthorized, "the registry", handOverWait)
	if err != nil {
		return "", err
	}
	if led {
		detail += ", leading to the registry here"
	}
	return detail, nil
}

// readyRegistryPod is the address (IP:port) of a ready registry Pod, or ""
// when there is none or the list fails.
func (in *initRun) readyRegistryPod(ctx context.Context) string {
	pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(in.labels("registry")).String()})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && kube.PodReady(&p) {
			return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(cluster.RegistryPort))
		}
	}
	return ""
}

// waitNodePort waits, where this process runs on a node (onNode), at most
// wait until the NodePort on 127.0.0.1 answers status, and says whether it
// did. Only with --registry-via nodeport is a NodePort that does not an
// error; otherwise the wait was best effort.
func (in *initRun) waitNodePort(ctx context.Context, onNode bool, status int, what string, wait time.Duration) (bool, error) {
	if !onNode {
		return false, nil
	}
	err := kube.WaitHTTP(ctx, cluster.RegistryHost(in.opts.NodePort), status, what, wait)
	if err != nil && in.opts.Via == reach.NodePort {
		return false, err
	}
	return err == nil, nil
}

// handOverWait bounds the hand-over's wait for the NodePort to lead to the
// registry (kube-proxy's sync, about a second) where this process sees it.
const handOverWait = 15 * time.Second

// kubeletHere says whether this process runs on a node: a kubelet listens
// on its loopback (its health port, 127.0.0.1:10248 by default, or its
// API's, 10250). Where it does, the node's kube-proxy serves NodePorts on
// 127.0.0.1 too.
func kubeletHere() bool {
	return listening("127.0.0.1:10248") || listening("127.0.0.1:10250")
}

// listening says whether something accepts a TCP connection at host within
// a moment.
func listening(host string) bool {
	c, err := net.DialTimeout("tcp", host, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (in *initRun) cleanUp(ctx context.Context) (string, error) {
	if in.opts.DeferInjectorWait {
		done := make(chan error, 1)
		in.res.cleanup = done
		go func() {
			// Its own context: Init returns meanwhile; the caller's wait
			// (WaitCleanup) has the caller's.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			done <- DeleteInjector(ctx, in.cs, in.ns)
		}()
		return "deleting the injector's objects", nil
	}
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
	repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: orasauth.StaticCredential(host, orasauth.Credential{Username: account.Username, Password: account.Password}), Client: reach.RegistryClient()}.Repository(host + "/" + RegistryRepository)
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
