package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// DeletePodsOnDeadNodes force-deletes (grace period 0) the Pods in ns
// matching sel whose node is NotReady or gone: their kubelet cannot stop
// them, so they would stay Terminating, and a Deployment would neither
// replace them nor, with the Recreate strategy, start its new Pods. It
// returns the names of the Pods deleted.
func DeletePodsOnDeadNodes(ctx context.Context, cs kubernetes.Interface, ns string, sel map[string]string) ([]string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		return nil, err
	}
	dead := map[string]bool{}
	var deleted []string
	zero := int64(0)
	for _, p := range pods.Items {
		n := p.Spec.NodeName
		if n == "" {
			continue
		}
		d, seen := dead[n]
		if !seen {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				d = true
			case err != nil:
				return deleted, err
			default:
				d = !NodeReady(node)
			}
			dead[n] = d
		}
		if !d {
			continue
		}
		if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			return deleted, fmt.Errorf("delete pod %s on node %s, which is down: %w", p.Name, n, err)
		}
		deleted = append(deleted, p.Name)
	}
	return deleted, nil
}

// NodeReady says whether n's Ready condition is true.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tendEvery is how often Tend looks.
const tendEvery = time.Second

// Tended counts what Tend did.
type Tended struct {
	// Restarted counts the Pods deleted because their image pull failed.
	Restarted int
	// DeadNode counts the Pods force-deleted on nodes that are down.
	DeadNode int
}

// Tend looks after the Pods in ns matching sel while a rollout is waited
// for, every second until stop is called:
//   - Pods whose image pull failed (ErrImagePull, ImagePullBackOff) are
//     deleted, so that their controller makes new ones that pull at once
//     instead of after the kubelet's back-off;
//   - Pods on nodes that are NotReady or gone are force-deleted
//     (DeletePodsOnDeadNodes): a ReplicaSet may make one there before a
//     Deployment scales it down, and it would never finish terminating.
//
// stop returns what it did.
func Tend(ctx context.Context, cs kubernetes.Interface, ns string, sel map[string]string) (stop func() Tended) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg  sync.WaitGroup
		got Tended
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		selector := labels.SelectorFromSet(sel).String()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(tendEvery):
			}
			if dead, err := DeletePodsOnDeadNodes(ctx, cs, ns, sel); err == nil {
				got.DeadNode += len(dead)
			}
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				continue
			}
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && pullFailed(&p) {
					if cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}) == nil {
						got.Restarted++
					}
				}
			}
		}
	}()
	return func() Tended {
		cancel()
		wg.Wait()
		return got
	}
}

func pullFailed(p *corev1.Pod) bool {
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
			return true
		}
	}
	return false
}
