package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestArgMatches(t *testing.T) {
	for _, tc := range []struct {
		pat, arg string
		want     bool
	}{
		{"--port=9443", "--port=9443", true},
		{"--port=9443", "--port=9444", false},
		{"--node-name=$(NODE_NAME)", "--node-name=node1", true},
		{"--node-name=$(NODE_NAME)", "--node-name=$(NODE_NAME)", true},
		{"--node-name=$(NODE_NAME)", "--pod-name=node1", false},
		{"$(A).$(B)", "x.y", true},
		{"$(A).$(B)", "xy", false},
		{"a.*", "abc", false}, // no regular expression
	} {
		if got := argMatches(tc.pat, tc.arg); got != tc.want {
			t.Errorf("argMatches(%q, %q) = %v", tc.pat, tc.arg, got)
		}
	}
}

// freePort gives a TCP port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestStandin: a Job's command line installs the program and exits 0; a
// server's listens on its ports, answering HTTP and HTTPS (its certificate
// naming the webhook Service), AdmissionReviews (allowed) and
// ConversionReviews (converted), skips a port already taken, and gives the
// API server its certificate as the caBundle of the webhooks naming its
// Service; an unknown command line is an error.
func TestStandin(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "self")
	if err := os.WriteFile(self, []byte("program"), 0o755); err != nil {
		t.Fatal(err)
	}
	port, port2 := freePort(t), freePort(t)
	taken, err := net.Listen("tcp", fmt.Sprintf(":%d", port2))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := standinConfig{Roles: []standinRole{
		{Argv: []string{"/bin/sh", "-c", "cp -f /x /etc/x/"}, Exit: true, Install: []string{filepath.Join(dir, "vol", "run")}},
		{Argv: []string{"/manager", "--namespace=$(POD_NAMESPACE)"}, Listen: []int{port, port2}, DNSNames: []string{"hook.ns.svc"},
			CABundles: []caBundleRef{{Resource: "validatingwebhookconfigurations", Name: "hooks", Service: "ns/hook"}}},
	}}
	var out bytes.Buffer
	s := &standin{cfg: cfg, self: self, stdout: &out}
	noAPI := func() (apiClient, error) { return apiClient{}, fmt.Errorf("no API server") }

	// The Job.
	if err := s.run(context.Background(), []string{"/bin/sh", "-c", "cp -f /x /etc/x/"}, noAPI); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "vol", "run")); err != nil || string(b) != "program" {
		t.Fatalf("installed %q, %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "vol", "run")); fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed with mode %v", fi.Mode())
	}
	if err := s.run(context.Background(), []string{"/bin/sh", "-c", "other"}, noAPI); err == nil || !strings.Contains(err.Error(), "no role") {
		t.Fatalf("an unknown command line: %v", err)
	}

	// The API server, holding one webhook configuration with two webhooks,
	// one of them towards the stand-in's Service.
	var mu sync.Mutex
	var put map[string]any
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hooks" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPut {
			mu.Lock()
			defer mu.Unlock()
			_ = json.NewDecoder(r.Body).Decode(&put)
			return
		}
		fmt.Fprint(w, `{"kind":"ValidatingWebhookConfiguration","webhooks":[{"name":"a","clientConfig":{"service":{"namespace":"ns","name":"hook"}}},{"name":"b","clientConfig":{"url":"https://elsewhere"}}]}`)
	}))
	defer api.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.run(ctx, []string{"/manager", "--namespace=ns"}, func() (apiClient, error) {
			return apiClient{url: api.URL, token: "tok", client: api.Client()}, nil
		})
	}()
	var caPEM string
	deadline := time.Now().Add(10 * time.Second)
	for caPEM == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		if hooks, ok := put["webhooks"].([]any); ok && len(hooks) == 2 {
			ca, _ := dig(hooks[0], "clientConfig", "caBundle").(string)
			b, _ := base64.StdEncoding.DecodeString(ca)
			caPEM = string(b)
			if dig(hooks[1], "clientConfig", "caBundle") != nil {
				t.Error("the caBundle set for another webhook")
			}
		}
		mu.Unlock()
	}
	if caPEM == "" {
		t.Fatalf("no caBundle put; stand-in said:\n%s", out.String())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("caBundle %q", caPEM)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	plain := &http.Client{Timeout: 5 * time.Second}
	// Trusting the caBundle, for the Service's name, as the API server does.
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "hook.ns.svc"},
	}}
	for _, tc := range []struct {
		client *http.Client
		url    string
		body   string
		want   string
	}{
		{plain, "http://" + addr + "/healthz", "", "ok\n"},
		{secure, "https://" + addr + "/readyz", "", "ok\n"},
		{secure, "https://" + addr + "/v1/admit",
			`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","object":{}}}`,
			`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true,"uid":"u1"}}` + "\n"},
		{secure, "https://" + addr + "/convert",
			`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u2","desiredAPIVersion":"g/v2","objects":[{"apiVersion":"g/v1","kind":"K","spec":{"a":1}}]}}`,
			`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"convertedObjects":[{"apiVersion":"g/v2","kind":"K","spec":{"a":1}}],"result":{"status":"Success"},"uid":"u2"}}` + "\n"},
	} {
		method := http.MethodGet
		if tc.body != "" {
			method = http.MethodPost
		}
		req, _ := http.NewRequest(method, tc.url, strings.NewReader(tc.body))
		resp, err := tc.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != tc.want {
			t.Errorf("%s %s: %s %q, want %q", method, tc.url, resp.Status, b, tc.want)
		}
	}
	// A TCP probe: connect, close.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	cancel() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stand-in did not stop on SIGTERM")
	}
	if !strings.Contains(out.String(), fmt.Sprintf("port %d: served by another container", port2)) {
		t.Errorf("the taken port: stand-in said:\n%s", out.String())
	}
}

// TestRunStandin: the configuration is read from JSON; a bad one is an error.
func TestRunStandin(t *testing.T) {
	var out bytes.Buffer
	if err := runStandin(context.Background(), []byte(`{"roles":[{"argv":["/job","$(X)"],"exit":true}]}`), []string{"/job", "y"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "done") {
		t.Errorf("printed %q", out.String())
	}
	if err := runStandin(context.Background(), []byte(`{"roles":`), []string{"/job"}, &out); err == nil {
		t.Error("a bad configuration: no error")
	}
}
