package kube

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A watched wait is woken by the watch's event, not its interval (here an
// hour, so only the event can end it); a watch that ends leaves the
// intervals.
func TestPollWatchWokenByEvent(t *testing.T) {
	w := watch.NewFake()
	var ready, calls atomic.Int32
	done := watchedWait(w, &ready, &calls)
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ready.Store(1)
	w.Add(&corev1.Pod{})
	select {
	case err := <-done:
		if err != nil || calls.Load() != 2 {
			t.Fatalf("woken: %v after %d checks, want nil after 2", err, calls.Load())
		}
	case <-time.After(time.Minute):
		t.Fatal("the event did not wake the wait")
	}

	// A watch that cannot be opened: the intervals alone.
	start := func(context.Context) (watch.Interface, error) { return nil, errors.New("forbidden") }
	n := 0
	if err := poll(context.Background(), time.Minute, time.Millisecond, time.Millisecond, start, func() (bool, error) { n++; return n == 3, nil }, "x"); err != nil {
		t.Fatal(err)
	}
}

// WaitPodReady sees a Pod become Ready through its watch.
func TestWaitPodReadyWatch(t *testing.T) {
	cs := fake.NewClientset()
	ctx := context.Background()
	sel := map[string]string{"app": "x"}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", Labels: sel}}
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- WaitPodReady(ctx, cs, "ns", sel, time.Minute, Crashed) }()
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// watchedWait runs a wait on w, with hour-long intervals, until ready is
// 1; calls counts its checks.
func watchedWait(w watch.Interface, ready, calls *atomic.Int32) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- poll(context.Background(), time.Hour, time.Hour, time.Hour,
			func(context.Context) (watch.Interface, error) { return w, nil },
			func() (bool, error) { calls.Add(1); return ready.Load() == 1, nil }, "ready")
	}()
	return done
}

// A burst of events (a watch from "0" first reports every object it
// matches) wakes a watched wait once, not once per event.
func TestPollWatchBurstWakesOnce(t *testing.T) {
	w := watch.NewFakeWithChanSize(8, false)
	for range 5 {
		w.Add(&corev1.Pod{})
	}
	var ready, calls atomic.Int32
	done := watchedWait(w, &ready, &calls)
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d checks after a burst of 5 events, want 2 (the first, one for the burst)", n)
	}
	ready.Store(1)
	w.Add(&corev1.Pod{})
	if err := <-done; err != nil || calls.Load() != 3 {
		t.Fatalf("%v after %d checks, want nil after 3", err, calls.Load())
	}
}

// The waits watch from resource version "0": from "now" the API server
// holds the watch until its cache has caught up with etcd (3 s against
// etcd 3.4 when nothing changes).
func TestWaitsWatchFromCache(t *testing.T) {
	cs := fake.NewClientset()
	var versions []string
	cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		versions = append(versions, a.(k8stesting.WatchActionImpl).ListOptions.ResourceVersion)
		return false, nil, nil
	})
	ctx := context.Background()
	sel := map[string]string{"app": "x"}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", Labels: sel},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Replicas: &one},
		Status: appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
	if _, err := cs.AppsV1().Deployments("ns").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WaitPodReady(ctx, cs, "ns", sel, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if err := WaitRollout(ctx, cs, "ns", "d", time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(versions) != 2 || versions[0] != "0" || versions[1] != "0" {
		t.Fatalf("watches from resource versions %q, want [0 0]", versions)
	}
}
