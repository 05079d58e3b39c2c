package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// TestServe: reviews over HTTPS at cluster.AgentPathMutate, readiness at cluster.AgentPathHealth
// following Ready; on cancellation the agent turns unready, keeps answering
// for the drain delay, and stops cleanly.
func TestServe(t *testing.T) {
	certFile, keyFile, client, err := fixture.SelfSignedLoopback(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + ln.Addr().String()
	var ready atomic.Bool
	wh := &Webhook{Rewriter: func(context.Context) (*Rewriter, error) { return testRewriter(t, false), nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, wh, ServeOptions{
			Listener: ln, CertFile: certFile, KeyFile: keyFile, DrainDelay: 300 * time.Millisecond,
			Ready: func(context.Context) error {
				if !ready.Load() {
					return errors.New("deployed packages not read yet")
				}
				return nil
			},
		})
	}()
	health := func() (int, string) {
		resp, err := client.Get(base + cluster.AgentPathHealth)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not read yet") {
		t.Fatalf("unready agent: %d %s", code, body)
	}
	ready.Store(true)
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("ready agent: %d %s", code, body)
	}

	raw, _ := json.Marshal(testPod())
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "apps",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}},
	})
	resp, err := client.Post(base+cluster.AgentPathMutate, "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || out.Response == nil || !out.Response.Allowed || out.Response.Patch == nil {
		t.Fatalf("review over HTTPS: %+v, %v", out.Response, err)
	}

	cancel()
	time.Sleep(100 * time.Millisecond)
	if code, body := health(); code != http.StatusServiceUnavailable {
		t.Fatalf("stopping agent: %d %s, want 503 while it drains", code, body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop")
	}
	if _, err := client.Get(base + cluster.AgentPathHealth); err == nil {
		t.Fatal("still serving after it stopped")
	}
}

// TestServeBadCertificate: a missing certificate is an error at once.
func TestServeBadCertificate(t *testing.T) {
	err := Serve(context.Background(), &Webhook{}, ServeOptions{CertFile: "/nonexistent/tls.crt", KeyFile: "/nonexistent/tls.key"})
	if err == nil || !strings.Contains(err.Error(), "serving certificate") {
		t.Fatalf("Serve: %v", err)
	}
}
