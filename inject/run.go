package inject

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// configMapsAtOnce is how many of a plan's ConfigMaps RunInjector creates
// at once.
const configMapsAtOnce = 4

// RunInjector creates a plan's objects (replacing leftovers of an earlier
// run) and waits until the injector Pod is Ready. A crash of the injector
// (a damaged chunk, a digest mismatch) fails at once with its message.
func RunInjector(ctx context.Context, cs kubernetes.Interface, plan *Plan, timeout time.Duration) error {
	if _, err := createInjector(ctx, cs, plan); err != nil {
		return err
	}
	return kube.WaitPodReady(ctx, cs, plan.Pod.Namespace, plan.Pod.Labels, timeout, kube.Crashed)
}

// createInjector creates a plan's objects, replacing leftovers of an
// earlier run, and returns how long the deletion took.
func createInjector(ctx context.Context, cs kubernetes.Interface, plan *Plan) (time.Duration, error) {
	ns := plan.Pod.Namespace
	start := time.Now()
	if err := DeleteInjector(ctx, cs, ns); err != nil {
		return 0, err
	}
	deleted := time.Since(start)
	// The Service first: kube-proxy syncs its NodePort while the rest is
	// made.
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &plan.Service, metav1.CreateOptions{}); err != nil {
		return deleted, fmt.Errorf("create Service %s: %w", plan.Service.Name, err)
	}
	// Several at once: each is a round trip to etcd of up to 1 MiB.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(configMapsAtOnce)
	for i := range plan.ConfigMaps {
		g.Go(func() error {
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(gctx, &plan.ConfigMaps[i], metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ConfigMap %s: %w", plan.ConfigMaps[i].Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return deleted, err
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &plan.Pod, metav1.CreateOptions{}); err != nil {
		return deleted, fmt.Errorf("create Pod %s: %w", plan.Pod.Name, err)
	}
	return deleted, nil
}

// DeleteInjector deletes every injector object in ns and waits until they are gone.
func DeleteInjector(ctx context.Context, cs kubernetes.Interface, ns string) error {
	if err := deleteInjector(ctx, cs, ns); err != nil {
		return err
	}
	return waitInjectorGone(ctx, cs, ns)
}

// deleteInjector deletes every injector object in ns (its Services waited
// for), its Pod at once (no grace period).
func deleteInjector(ctx context.Context, cs kubernetes.Interface, ns string) error {
	sel := injectorSelector()
	bg := metav1.DeletePropagationBackground
	if err := deleteInjectorServices(ctx, cs, ns); err != nil {
		return err
	}
	grace := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &bg}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := cs.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// waitInjectorGone waits until no injector object is left in ns.
func waitInjectorGone(ctx context.Context, cs kubernetes.Interface, ns string) error {
	sel := injectorSelector()
	return kube.Poll(ctx, 2*time.Minute, func() (bool, error) {
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

func injectorSelector() string {
	return labels.SelectorFromSet(map[string]string{cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelComponent: "injector"}).String()
}

// deleteInjectorServices deletes the injector's Services and waits until
// they are gone: their NodePort is free then (the hand-over needs no more).
func deleteInjectorServices(ctx context.Context, cs kubernetes.Interface, ns string) error {
	sel := injectorSelector()
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	for _, s := range svcs.Items { // Services have no DeleteCollection
		if err := cs.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return kube.Poll(ctx, 2*time.Minute, func() (bool, error) {
		svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		return err == nil && len(svcs.Items) == 0, err
	}, "injector Services still there")
}
