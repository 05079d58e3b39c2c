package kube

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

// A watched wait is woken by the watch's event, not its interval (here an
// hour, so only the event can end it); a watch that ends leaves the
// intervals.
func TestPollWatchWokenByEvent(t *testing.T) {
	w := watch.NewFake()
	var ready, calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- poll(context.Background(), time.Hour, time.Hour, time.Hour,
			func(context.Context) (watch.Interface, error) { return w, nil },
			func() (bool, error) { calls.Add(1); return ready.Load() == 1, nil }, "ready")
	}()
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
