package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestUpsert(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	updates := 0
	cs.PrependReactor("update", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		return false, nil, nil
	})
	c := cs.CoreV1().Services("ferry")
	merge := func(cur, want *corev1.Service) { cur.Labels = want.Labels }
	svc := func(v string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ferry", Labels: map[string]string{"v": v}}}
	}
	for _, step := range []struct {
		v       string
		updates int
	}{{"1", 0}, {"1", 0}, {"2", 1}} { // create, unchanged, changed
		if err := Upsert(ctx, c, svc(step.v), merge); err != nil {
			t.Fatal(err)
		}
		got, err := c.Get(ctx, "s", metav1.GetOptions{})
		if err != nil || got.Labels["v"] != step.v || updates != step.updates {
			t.Fatalf("after %s: %v, %v, %d updates", step.v, got.Labels, err, updates)
		}
	}
}

func TestApplySecret(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset().CoreV1().Secrets("ferry")
	for _, v := range []string{"a", "b"} {
		if err := ApplySecret(ctx, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte(v)}}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, "s", metav1.GetOptions{}); err != nil || string(got.Data["k"]) != v {
			t.Fatalf("%s: %v %v", v, got, err)
		}
	}
}

func TestDeleteAndWait(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ferry"}})
	c := cs.CoreV1().ConfigMaps("ferry")
	for range 2 { // there, then already gone
		if err := DeleteAndWait(ctx, c, "cm"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaitPodReady: a Ready pod ends the wait; a crashed one fails it at
// once with its message; none Ready times out, telling the pod's state.
func TestWaitPodReady(t *testing.T) {
	ctx := context.Background()
	sel := map[string]string{"app": "x"}
	pod := func(name string, st corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry", Labels: sel}, Status: st}
	}
	ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	crashed := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: "bad\nchunk"}},
	}}}
	waiting := corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}},
	}}}

	if err := WaitPodReady(ctx, fake.NewClientset(pod("a", ready)), "ferry", sel, time.Second, Crashed); err != nil {
		t.Fatalf("ready: %v", err)
	}
	err := WaitPodReady(ctx, fake.NewClientset(pod("b", crashed)), "ferry", sel, time.Minute, Crashed)
	if err == nil || !strings.Contains(err.Error(), "pod b: container c exited with status 2: bad chunk") {
		t.Fatalf("crashed: %v", err)
	}
	err = WaitPodReady(ctx, fake.NewClientset(pod("c", waiting)), "ferry", sel, time.Second, Crashed)
	if !errors.Is(err, ErrTimedOut) || !strings.Contains(err.Error(), "pod c: Pending, c waiting: ErrImagePull") {
		t.Fatalf("waiting: %v", err)
	}
}
