package inject

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// A registry running another image (an earlier ferry's) is replaced in
// place rather than injected anew: the injector would take its NodePort,
// and every pull meanwhile would fail. The new image goes into the running
// registry; the Deployment surges a new Pod of it for each old one (on
// the filesystem, on the same node, sharing the storage), holding the old
// ones for rollHold once the new are Ready; meanwhile the Service turns to
// the new revision alone, so the old Pods stop with no connection sent to
// them — an earlier ferry's registry closes its listener at once on
// SIGTERM.
const (
	// rollHold is the Deployment's MinReadySeconds during the roll: how
	// long the old Pods keep serving once the new ones are Ready.
	rollHold = 20 * time.Second
	// proxySettle is how long after the Service's endpoints name only the
	// new Pods every node's kube-proxy is taken to follow (its
	// iptables sync, about a second).
	proxySettle = 3 * time.Second
	// drainDelay is how long a registry keeps accepting connections after
	// SIGTERM (ferry-registry --drain-delay): its endpoint leaves every
	// kube-proxy meanwhile, and a Pod evicted alone (a drain) serves until
	// its replacement is Ready — kube-proxy keeps sending to a terminating
	// Pod that serves when no other is ready.
	drainDelay = 6 * time.Second
	// shutdownGrace is how long requests in flight then have to finish
	// (ferry-registry --shutdown-timeout's default).
	shutdownGrace = 25 * time.Second
)

// revision is the LabelRevision value of a registry Pod running image.
func revision(image string) string {
	_, hex, _ := strings.Cut(image, "@sha256:")
	if len(hex) > 32 {
		hex = hex[:32]
	}
	return hex
}

func withRevision(l map[string]string, image string) map[string]string {
	out := maps.Clone(l)
	if r := revision(image); r != "" {
		out[cluster.LabelRevision] = r
	}
	return out
}

// canRoll says whether the registry Deployment d, running another image,
// can be replaced in place: on the same storage and node with as many
// replicas, with a Ready Pod to take the new image, and a way to it.
func (in *initRun) canRoll(ctx context.Context, d *appsv1.Deployment) bool {
	if in.opts.Config == nil && in.opts.Via != reach.NodePort {
		return false
	}
	if DeploymentStorage(d) != in.res.Storage || d.Spec.Replicas == nil || *d.Spec.Replicas != in.opts.Replicas {
		return false
	}
	if in.opts.S3 == nil && d.Spec.Template.Spec.NodeName != in.res.Node {
		return false
	}
	return kube.WaitPodReady(ctx, in.cs, in.ns, in.labels("registry"), 10*time.Second, nil) == nil
}

// roll replaces the running registry with in.res.Image in place.
func (in *initRun) roll(ctx context.Context) (string, error) {
	start := time.Now()
	ep, err := reach.Registry(ctx, in.cs, reach.Options{Via: in.opts.Via, Namespace: in.ns, Config: in.opts.Config, NodeHost: in.res.Registry})
	if err != nil {
		return "", err
	}
	desc, err := PushRegistryImage(ctx, in.cs, in.ns, ep.Host, in.opts.BinDir, in.arch)
	ep.Close()
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(in.res.Image, "@"+desc.Digest.String()) {
		return "", fmt.Errorf("pushed %s into the running registry, the new one runs %s", desc.Digest, in.res.Image)
	}
	pushed := time.Since(start)

	d := in.registryDeployment()
	surge := intstr.FromInt32(in.opts.Replicas)
	none := intstr.FromInt32(0)
	final := d.Spec
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &none}}
	d.Spec.MinReadySeconds = int32(rollHold.Seconds())
	if err := kube.ApplyDeployment(ctx, in.cs, d); err != nil {
		return "", err
	}
	newPods := withRevision(in.labels("registry"), in.res.Image)
	var ips map[string]bool
	err = kube.PollWatch(ctx, in.opts.WaitTimeout, in.cs.CoreV1().Pods(in.ns).Watch, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(newPods).String()}, func() (bool, error) {
		ips, err = readyPodIPs(ctx, in, newPods)
		return len(ips) >= int(in.opts.Replicas), err
	}, "the new registry Pods not Ready")
	if err != nil {
		return "", err
	}
	ready := time.Since(start)
	// The Service leads to the new Pods alone, and every node follows,
	// before the Deployment stops the old ones (rollHold after Ready).
	if err := in.serviceSelector(ctx, newPods); err != nil {
		return "", err
	}
	if err := in.waitEndpoints(ctx, ips); err != nil {
		return "", err
	}
	time.Sleep(proxySettle)
	if err := kube.WaitRollout(ctx, in.cs, in.ns, cluster.RegistryName, in.opts.WaitTimeout); err != nil {
		return "", err
	}
	// Every Pod is the new revision: the Service and the Deployment as a
	// fresh init makes them (neither change starts a rollout).
	if err := in.serviceSelector(ctx, in.labels("registry")); err != nil {
		return "", err
	}
	d.Spec = final
	if err := kube.ApplyDeployment(ctx, in.cs, d); err != nil {
		return "", err
	}
	return fmt.Sprintf("replaced in place: image pushed into the running registry %.1fs, new Pod(s) Ready %.1fs, the Service turned to them, old Pod(s) stopped %.1fs", pushed.Seconds(), ready.Seconds(), time.Since(start).Seconds()), nil
}

// readyPodIPs are the IPs of the Ready Pods matching sel, none being
// deleted; a Pod that crashed ends the wait with its error.
func readyPodIPs(ctx context.Context, in *initRun, sel map[string]string) (map[string]bool, error) {
	pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		return nil, err
	}
	ips := map[string]bool{}
	for _, p := range pods.Items {
		if err := kube.Crashed(&p); err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && kube.PodReady(&p) {
			ips[p.Status.PodIP] = true
		}
	}
	return ips, nil
}

// serviceSelector sets the registry Service's selector.
func (in *initRun) serviceSelector(ctx context.Context, sel map[string]string) error {
	svcs := in.cs.CoreV1().Services(in.ns)
	svc, err := svcs.Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("Service %s: %w", cluster.RegistryName, err)
	}
	if maps.Equal(svc.Spec.Selector, sel) {
		return nil
	}
	svc.Spec.Selector = sel
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Service %s: %w", cluster.RegistryName, err)
	}
	return nil
}

// waitEndpoints waits until the registry Service's endpoints are ready
// addresses among ips and nothing else. A timeout names what it last saw
// in the way: an address that is not one of the new Pods' (and its
// EndpointSlice), or no ready endpoint at all.
func (in *initRun) waitEndpoints(ctx context.Context, ips map[string]bool) error {
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + cluster.RegistryName}
	blocker := "no EndpointSlice of the Service lists a ready address"
	err := kube.PollWatch(ctx, in.opts.WaitTimeout, in.cs.DiscoveryV1().EndpointSlices(in.ns).Watch, sel, func() (bool, error) {
		slices, err := in.cs.DiscoveryV1().EndpointSlices(in.ns).List(ctx, sel)
		if err != nil {
			return false, err
		}
		n := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if !ips[a] {
						blocker = fmt.Sprintf("EndpointSlice %s still lists %s, which is none of the new registry Pods", s.Name, a)
						return false, nil
					}
				}
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					n++
				}
			}
		}
		blocker = "no EndpointSlice of the Service lists a ready address"
		return n > 0, nil
	}, "the registry Service to lead to the new Pods only")
	if errors.Is(err, kube.ErrTimedOut) {
		return fmt.Errorf("%w (%s)", err, blocker)
	}
	return err
}
