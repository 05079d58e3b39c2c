package kube

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// fakePortForward is an API server's portforward subresource that speaks
// only SPDY (a WebSocket upgrade is refused, so the tunnel falls back) and
// forwards each data stream to backend. Drop closes every connection.
type fakePortForward struct {
	backend string
	mu      sync.Mutex
	conns   []httpstream.Connection
	pods    []string
}

func (f *fakePortForward) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "no websocket here", http.StatusBadRequest)
		return
	}
	parts := strings.Split(r.URL.Path, "/") // /api/v1/namespaces/NS/pods/NAME/portforward
	if _, err := httpstream.Handshake(r, w, []string{portforward.PortForwardProtocolV1Name}); err != nil {
		return
	}
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replySent <-chan struct{}) error {
		go func() {
			<-replySent
			if s.Headers().Get(corev1.StreamType) == corev1.StreamTypeError {
				return // closed when the data stream is done
			}
			c, err := net.Dial("tcp", f.backend)
			if err != nil {
				s.Reset()
				return
			}
			go func() { io.Copy(c, s); c.(*net.TCPConn).CloseWrite() }()
			io.Copy(s, c)
			s.Close()
		}()
		return nil
	})
	if conn == nil {
		return
	}
	f.mu.Lock()
	f.conns = append(f.conns, conn)
	f.pods = append(f.pods, parts[len(parts)-2])
	f.mu.Unlock()
	<-conn.CloseChan()
}

func (f *fakePortForward) drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// TestTunnel: connections to the tunnel's address reach the Pod's port
// (SPDY after the WebSocket upgrade is refused); after the connection to
// the API server drops, the next connection picks a Pod again, on the same
// local address.
func TestTunnel(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "registry") }))
	defer backend.Close()
	fake := &fakePortForward{backend: strings.TrimPrefix(backend.URL, "http://")}
	api := httptest.NewServer(fake)
	defer api.Close()
	cfg := &rest.Config{Host: api.URL}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var picks atomic.Int32
	tun, err := OpenTunnel(context.Background(), cfg, cs, TunnelOptions{Namespace: "ferry", Port: 5000, Pick: func(context.Context) (string, error) {
		return fmt.Sprintf("registry-%d", picks.Add(1)), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	get := func() string {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + tun.Addr() + "/v2/")
		if err != nil {
			t.Fatalf("through the tunnel: %v (tunnel: %v)", err, tun.Err())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for range 3 {
		if got := get(); got != "registry" {
			t.Fatalf("got %q", got)
		}
	}
	if info := tun.Info(); info.Protocol != ProtocolSPDY || info.Dials != 1 || info.Pod != "registry-1" {
		t.Fatalf("info %+v", info)
	}
	addr := tun.Addr()
	fake.drop()
	if got := get(); got != "registry" || tun.Addr() != addr {
		t.Fatalf("after a drop: %q at %s", got, tun.Addr())
	}
	if info := tun.Info(); info.Dials != 2 || info.Pod != "registry-2" {
		t.Fatalf("after a drop: info %+v", info)
	}
	if err := tun.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the tunnel's address answers after Close")
	}
}
