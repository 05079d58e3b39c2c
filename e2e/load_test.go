package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/e2e/internal/harness"
)

// podLoad creates Pods in a namespace, one every interval, round-robin over
// nodes, each pulling image anew (imagePullPolicy Always: every one asks
// the registry) through the agent's rewrite — what a cluster does while
// ferry is upgraded or a node drained. Pods that run are deleted as they
// are seen, so the nodes carry a few at a time.
type podLoad struct {
	c     *harness.Cluster
	ns    string
	nodes []string
	image string

	mu       sync.Mutex
	created  int
	refused  []string // admission errors
	started  map[string]bool
	pending  map[string]string // name → node
	stop     chan struct{}
	finished chan struct{}
}

// loadCount is what a podLoad saw.
type loadCount struct {
	Created, Refused, Started, NeverStarted, PullFailures int
	Failures                                              []string
}

func (n loadCount) String() string {
	return fmt.Sprintf("%d Pods created, %d refused at admission, %d started, %d never started, %d with a failed pull",
		n.Created, n.Refused, n.Started, n.NeverStarted, n.PullFailures)
}

func startPodLoad(ctx context.Context, t *testing.T, c *harness.Cluster, ns string, nodes []string, image string, every time.Duration) *podLoad {
	t.Helper()
	l := &podLoad{c: c, ns: ns, nodes: nodes, image: image, started: map[string]bool{}, pending: map[string]string{}, stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(l.finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("load-%04d", i)
			node := nodes[i%len(nodes)]
			pod := tinyPod(name, image, corev1.PullAlways)
			pod.Spec.NodeName = node
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := c.Client.CoreV1().Pods(ns).Create(cctx, pod, metav1.CreateOptions{})
			cancel()
			l.mu.Lock()
			l.created++
			if err != nil {
				l.refused = append(l.refused, fmt.Sprintf("%s: %v", name, err))
			} else {
				l.pending[name] = node
			}
			l.mu.Unlock()
			if i%4 == 3 {
				l.reap(ctx)
			}
		}
	}()
	return l
}

// reap deletes the Pods that run, counting them started.
func (l *podLoad) reap(ctx context.Context) {
	list, err := l.c.Client.CoreV1().Pods(l.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodRunning || !podReady(&p) || p.DeletionTimestamp != nil {
			continue
		}
		l.mu.Lock()
		l.started[p.Name] = true
		delete(l.pending, p.Name)
		l.mu.Unlock()
		_ = l.c.Client.CoreV1().Pods(l.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
}

// Created is how many Pods the load has created (or tried to) so far.
func (l *podLoad) Created() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created
}

// Stop ends the creations, waits up to wait for every Pod created to
// run, and counts; a Pod with a failed pull (an event of its kubelet)
// counts even if a retry later ran it.
func (l *podLoad) Stop(ctx context.Context, t *testing.T, wait time.Duration) loadCount {
	t.Helper()
	close(l.stop)
	<-l.finished
	deadline := time.Now().Add(wait)
	for {
		l.reap(ctx)
		l.mu.Lock()
		left := len(l.pending)
		l.mu.Unlock()
		if left == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := loadCount{Created: l.created, Refused: len(l.refused), Started: len(l.started), NeverStarted: len(l.pending)}
	n.Failures = append(n.Failures, l.refused...)
	for name, node := range l.pending {
		n.Failures = append(n.Failures, fmt.Sprintf("%s on %s never started%s", name, node, harness.Events(ctx, l.c.Client, l.ns, "Pod", name)))
	}
	events, err := l.c.Client.CoreV1().Events(l.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind != "Pod" {
			continue
		}
		msg := e.Reason + ": " + e.Message
		if e.Reason == "Failed" || e.Reason == "BackOff" || strings.Contains(msg, "ErrImagePull") || strings.Contains(msg, "ImagePullBackOff") {
			if _, ok := failed[e.InvolvedObject.Name]; !ok {
				failed[e.InvolvedObject.Name] = msg
			}
		}
	}
	n.PullFailures = len(failed)
	for name, msg := range failed {
		n.Failures = append(n.Failures, name+": "+oneLineMsg(msg))
	}
	sort.Strings(n.Failures)
	return n
}

func oneLineMsg(s string) string { return strings.Join(strings.Fields(s), " ") }
