package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/registry"
)

// Registry is ferry's embedded registry (in memory, plain HTTP) serving on a
// loopback port the node's containerd pulls from, so pods can name images
// Host+"/repo@sha256:…". It records the requests it serves.
type Registry struct {
	// Host is the registry's address, e.g. "127.0.0.1:5000".
	Host string

	mu       sync.Mutex
	requests []string
}

// StartRegistry starts a registry on the first free port of RegistryPorts
// and stops it when t ends.
func (c *Cluster) StartRegistry(t testing.TB) *Registry {
	t.Helper()
	var l net.Listener
	var errs []error
	for _, p := range c.RegistryPorts {
		var err error
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if l == nil {
		t.Fatalf("registry: no free port among %v: %v", c.RegistryPorts, errors.Join(errs...))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := registry.New(ctx, registry.Config{})
	if err != nil {
		cancel()
		l.Close()
		t.Fatalf("registry: %v", err)
	}
	r := &Registry{Host: l.Addr().String()}
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.requests = append(r.requests, req.Method+" "+req.URL.Path)
			r.mu.Unlock()
			srv.ServeHTTP(w, req)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(l) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := hs.Shutdown(sctx); err != nil {
			t.Errorf("registry %s: shutdown: %v", r.Host, err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("registry %s: %v", r.Host, err)
		}
		_ = srv.Shutdown(sctx)
		cancel()
	})
	return r
}

// Requests returns "METHOD /path" of every request served so far.
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// Served reports whether a request with this method and path was served.
func (r *Registry) Served(method, path string) bool {
	want := method + " " + path
	for _, s := range r.Requests() {
		if s == want {
			return true
		}
	}
	return false
}

// Push copies img into repository repo of the registry and returns the
// reference pods use: Host/repo@<manifest digest>.
func (r *Registry) Push(ctx context.Context, repo string, img *mkimg.Image) (string, error) {
	dst, err := remote.NewRepository(r.Host + "/" + repo)
	if err != nil {
		return "", fmt.Errorf("registry %s: %w", r.Host, err)
	}
	dst.PlainHTTP = true
	if err := oras.CopyGraph(ctx, img, dst, img.Manifest, oras.DefaultCopyGraphOptions); err != nil {
		return "", fmt.Errorf("push %s to %s/%s: %w", img.Manifest.Digest, r.Host, repo, err)
	}
	return r.Host + "/" + repo + "@" + img.Manifest.Digest.String(), nil
}

// WaitHTTP GETs url every 250 ms until it answers 200 and returns the body;
// for at most DefaultTimeout when ctx has no deadline. A new Service can take
// kube-proxy ~20 s to program.
func WaitHTTP(ctx context.Context, url string) (string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	var body string
	var last error
	err := poll(ctx, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			last = fmt.Errorf("%s (%v): %s", resp.Status, err, oneLine(string(b)))
			return false, nil
		}
		body = string(b)
		return true, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w; last: %v", err, last)
		}
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	return body, nil
}
