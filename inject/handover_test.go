package inject

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// The injector's wait on a node ends when the NodePort answers, Ready or
// not (its Service publishes a Pod not yet Ready); a crash of its Pod ends
// it with the container's error even though nothing answers; off a node,
// Ready is the wait.
func TestWaitInjector(t *testing.T) {
	ctx := context.Background()
	sel := map[string]string{"app.kubernetes.io/component": "injector"}
	pod := func(cs *fake.Clientset, status corev1.PodStatus) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ferry-injector", Namespace: "ferry", Labels: sel}, Status: status}
		if _, err := cs.CoreV1().Pods("ferry").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(cs *fake.Clientset, port int, onNode bool) (bool, error) {
		in := &initRun{cs: cs, ns: "ferry", opts: InitOptions{NodePort: int32(port), Via: reach.NodePort, WaitTimeout: time.Minute}}
		return in.waitInjector(ctx, sel, onNode, time.Minute)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	cs := fake.NewClientset()
	pod(cs, corev1.PodStatus{Phase: corev1.PodPending})
	if led, err := run(cs, port, true); err != nil || !led {
		t.Fatalf("NodePort answering, Pod not Ready: led %v, %v", led, err)
	}

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ = net.SplitHostPort(l.Addr().String())
	closed, _ := strconv.Atoi(p)
	l.Close()
	cs = fake.NewClientset()
	pod(cs, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "injector", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: "chunk 3: digest mismatch"}},
	}}})
	if _, err := run(cs, closed, true); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("crashed Pod, nothing answering: %v", err)
	}

	cs = fake.NewClientset()
	pod(cs, corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	if led, err := run(cs, closed, false); err != nil || led {
		t.Fatalf("off a node, Pod Ready: led %v, %v", led, err)
	}
}

// The hand-over turns the injector's Service to the registry in place (its
// cluster IP, NodePort and UID kept: only the endpoints change); run again
// it has nothing to do; a Service of an older ferry's injector, under
// another name, is replaced.
func TestHandOverInPlace(t *testing.T) {
	ctx := context.Background()
	plan, err := NewPlan(Options{Namespace: "ferry", NodeName: "node1", Image: "pause", Arch: "amd64", Stage1: []byte("stage-1"),
		Payload: Payload{Data: []byte("p"), Digest: digest.FromString("p")}})
	if err != nil {
		t.Fatal(err)
	}
	injSvc := plan.Service
	injSvc.UID, injSvc.Spec.ClusterIP = "u1", "10.96.0.9"
	cs := fake.NewClientset(&injSvc)
	in := &initRun{cs: cs, ns: "ferry", opts: InitOptions{NodePort: cluster.DefaultNodePort, Via: reach.Tunnel}, res: &InitResult{}}
	if _, err := in.handOver(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Services("ferry").Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != "u1" || got.Spec.ClusterIP != "10.96.0.9" || got.Spec.Ports[0].NodePort != cluster.DefaultNodePort ||
		got.Spec.PublishNotReadyAddresses || got.Spec.Selector[cluster.LabelComponent] != "registry" || got.Labels[cluster.LabelComponent] != "registry" {
		t.Fatalf("after the hand-over: %+v", got)
	}
	if detail, err := in.handOver(ctx); err != nil || detail != "" {
		t.Fatalf("again: %q, %v", detail, err)
	}

	old := plan.Service
	old.Name = "ferry-injector"
	cs = fake.NewClientset(&old)
	in.cs = cs
	if _, err := in.handOver(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services("ferry").Get(ctx, "ferry-injector", metav1.GetOptions{}); err == nil {
		t.Fatal("an older injector's Service is left holding the NodePort")
	}
	if got, err := cs.CoreV1().Services("ferry").Get(ctx, cluster.RegistryName, metav1.GetOptions{}); err != nil || got.Spec.Selector[cluster.LabelComponent] != "registry" {
		t.Fatalf("registry Service: %+v, %v", got, err)
	}
}
