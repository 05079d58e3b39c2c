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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/internal/reach"
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
