package kube

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/kubetest"
)

// fakeRegistry is the Pod: a registry's upload, which wants basic auth.
func fakeRegistry(t *testing.T, gotBytes *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cluster.AcceptForwardedAuth(w, r)
		if u, p, ok := r.BasicAuth(); !ok || u != "bob" || p != "pa55" {
			w.Header().Set("WWW-Authenticate", `Basic realm="ferry"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v2/":
			fmt.Fprint(w, "{}")
		case r.Method == http.MethodPost && r.URL.Path == "/v2/app/blobs/uploads/":
			// On the Pod's own address, as distribution builds it from Host.
			w.Header().Set("Location", "http://"+r.Host+"/v2/app/blobs/uploads/u1?_state=s")
			w.WriteHeader(http.StatusAccepted)
		case r.Method == http.MethodPut && r.URL.Path == "/v2/app/blobs/uploads/u1" && r.URL.Query().Get("_state") == "s":
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			gotBytes.Store(n)
			if err != nil || "sha256:"+hex.EncodeToString(h.Sum(nil)) != r.URL.Query().Get("digest") {
				http.Error(w, "digest mismatch", http.StatusBadRequest)
				return
			}
			// Relative, as distribution with relative URLs.
			w.Header().Set("Location", "/v2/app/blobs/"+r.URL.Query().Get("digest"))
			w.WriteHeader(http.StatusCreated)
		case r.URL.Path == "/slow":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	})
}

// TestPodProxy: requests reach the Pod through the API server with the
// client's credentials in cluster.ForwardedAuthHeader (the API server's own in
// Authorization); the Pod's Locations lead back through the local address;
// a large body streams through whole; an answer of the API server in the
// Pod's place ends the client's connection and the next request picks a
// Pod again; a deleted Pod's request in flight ends.
func TestPodProxy(t *testing.T) {
	var got atomic.Int64
	fake := &kubetest.PodsProxy{Pod: fakeRegistry(t, &got), Token: "kube-token"}
	api := httptest.NewServer(fake)
	defer api.Close()
	cfg := &rest.Config{Host: api.URL, BearerToken: "kube-token"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var picks atomic.Int32
	px, err := OpenPodProxy(context.Background(), cfg, cs, PodProxyOptions{
		Namespace: "ferry", Port: 5000, AuthHeader: cluster.ForwardedAuthHeader, FromPod: cluster.FromRegistry,
		Pick: func(context.Context) (string, error) { return fmt.Sprintf("registry-%d", picks.Add(1)), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	base := "http://" + px.Addr()
	c := &http.Client{Timeout: time.Minute}
	do := func(method, url string, body io.Reader) (*http.Response, error) {
		req, err := http.NewRequest(method, url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("bob", "pa55")
		return c.Do(req)
	}

	resp, err := http.Get(base + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("anonymous GET /v2/: %s", resp.Status)
	}

	// A path that would climb out of the Pod's proxy path, to the API
	// server's other resources with this user's credentials, is refused
	// (as sent: neither Go's client nor a raw connection cleans it).
	for _, path := range []string{"/v2/../../../../secrets", "/v2/%2e%2e/%2E%2E/x", "/v2/./x", "/v2/..%2f..%2fx"} {
		c, err := net.Dial("tcp", px.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, px.Addr())
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %s, want 400", path, resp.Status)
		}
	}

	// An upload: POST, then PUT of 64 MiB to where the Location leads.
	resp, err = do(http.MethodPost, base+"/v2/app/blobs/uploads/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc != "/v2/app/blobs/uploads/u1?_state=s" {
		t.Fatalf("POST: %s, Location %q, want a path on the local address", resp.Status, loc)
	}
	blob := make([]byte, 64<<20)
	rand.Read(blob)
	sum := sha256.Sum256(blob)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	resp, err = do(http.MethodPut, base+loc+"&digest="+digest, strings.NewReader(string(blob)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || got.Load() != int64(len(blob)) || resp.Header.Get("Location") != "/v2/app/blobs/"+digest {
		t.Fatalf("PUT: %s, %d of %d bytes, Location %q", resp.Status, got.Load(), len(blob), resp.Header.Get("Location"))
	}
	if n := fake.BadAuth(); n != 0 {
		t.Fatalf("%d requests reached the API server without the kubeconfig's token", n)
	}

	// The API server cannot reach the Pod: the connection ends, Err says
	// why, and the next request goes to another Pod.
	fake.Down("registry-1", true)
	// (On a new connection: on a reused one, net/http's client would
	// retry the GET at once, and reach the next Pod.)
	if resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(base + "/v2/"); err == nil {
		resp.Body.Close()
		t.Fatalf("through an API server that cannot reach the Pod: %s, want the connection ended", resp.Status)
	}
	if err := px.Err(); err == nil || !strings.Contains(err.Error(), "no route to host") || !strings.Contains(err.Error(), "ferry/registry-1") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Err() = %v", err)
	}
	resp, err = do(http.MethodGet, base+"/v2/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if info := px.Info(); resp.StatusCode != http.StatusOK || info.Pod != "registry-2" || info.Dials != 2 || info.Protocol != ProtocolProxy {
		t.Fatalf("after the Pod went: %s, %+v", resp.Status, info)
	}

	// The Pod is deleted while a request is in flight: it ends.
	resp, err = do(http.MethodGet, base+"/slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	fake.Delete("registry-2")
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the request to a deleted Pod ended as if whole")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request to a deleted Pod is still open after 10 s")
	}
	if err := px.Err(); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("Err() = %v", err)
	}
	if err := px.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/v2/"); err == nil {
		t.Fatal("the proxy's address answers after Close")
	}
}
