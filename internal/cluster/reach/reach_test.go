package reach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferrypkg/ferry/internal/cluster"
)

func TestParseVia(t *testing.T) {
	for _, s := range []string{"auto", "nodeport", "tunnel", "port-forward"} {
		if v, err := ParseVia(s); err != nil || string(v) != s {
			t.Errorf("ParseVia(%q) = %q, %v", s, v, err)
		}
	}
	if _, err := ParseVia("ssh"); err == nil || !strings.Contains(err.Error(), "auto, nodeport, tunnel or port-forward") {
		t.Errorf("ParseVia(ssh): %v", err)
	}
}

func state(ns, host string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster.StateName, Namespace: ns}, Data: cluster.State{Registry: host}.Data()}
}

// allow answers every SelfSubjectAccessReview with allowed.
func allow(allowed bool) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = allowed
		return true, r, nil
	}
}

func registryPod(name, node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry", Labels: cluster.RegistryLabels()},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func node(name string, ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

// TestAutoTakesTheNodePort: a NodePort that answers as the registry does
// (401) is taken, without a tunnel.
func TestAutoTakesTheNodePort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ep, err := Registry(context.Background(), fake.NewClientset(state("ferry", host)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if ep.Via != NodePort || ep.Host != host || ep.NodeHost != host {
		t.Fatalf("endpoint %+v, want the NodePort %s", ep, host)
	}
}

// TestErrors: each failure names its cause and fix in one line, and no
// tunnel is opened (there is no API server to open it to).
func TestErrors(t *testing.T) {
	// A port nothing listens on: auto goes on to the tunnel.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName, Namespace: "ferry"}}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		allowed bool
		via     Via
		want    error
		say     []string
	}{
		{"no state", nil, true, Auto, ErrNoRegistry, []string{"namespace ferry"}},
		{"no deployment", []runtime.Object{state("ferry", closed)}, true, Tunnel, ErrNoRegistry, nil},
		{"rbac", []runtime.Object{state("ferry", closed), dep}, false, Auto, ErrForbidden, []string{"namespace ferry"}},
		{"node down", []runtime.Object{state("ferry", closed), dep, registryPod("ferry-registry-a", "node1", false), node("node1", false)}, true, Tunnel, ErrNoReadyPod,
			[]string{"pod ferry-registry-a running on node node1, which is NotReady"}},
		{"node gone", []runtime.Object{state("ferry", closed), dep, registryPod("ferry-registry-a", "node1", false)}, true, Tunnel, ErrNoReadyPod,
			[]string{"node node1, which is gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objs...)
			cs.PrependReactor("create", "selfsubjectaccessreviews", allow(tc.allowed))
			_, err := Registry(context.Background(), cs, Options{Via: tc.via, Config: cfg})
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			for _, s := range tc.say {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line", err)
			}
		})
	}
}

func TestRetry(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), 3, func() error {
		calls++
		return fmt.Errorf("put blob: %w", io.ErrUnexpectedEOF)
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) || calls != 3 {
		t.Fatalf("%d calls, %v", calls, err)
	}
	calls = 0
	err = Retry(context.Background(), 3, func() error { calls++; return errors.New("401 unauthorized") })
	if err == nil || calls != 1 {
		t.Fatalf("an answer of the registry was retried: %d calls, %v", calls, err)
	}
	calls = 0
	err = Retry(context.Background(), 3, func() error {
		if calls++; calls < 2 {
			return &net.OpError{Op: "read", Err: syscall.ECONNRESET}
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("%d calls, %v", calls, err)
	}
}
