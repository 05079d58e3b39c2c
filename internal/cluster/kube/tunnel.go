package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// The protocols a Tunnel speaks to the API server, as TunnelInfo reports them.
const (
	// ProtocolWebSocket is SPDY framed in a WebSocket, which Kubernetes
	// 1.31 and later prefer (and proxies pass).
	ProtocolWebSocket = "websocket"
	// ProtocolSPDY is the older SPDY upgrade, the fallback.
	ProtocolSPDY = "spdy"
)

// PodPicker chooses the Pod a Tunnel forwards to, each time it (re)connects.
// It returns the Pod's name, or an error saying why there is none.
type PodPicker func(ctx context.Context) (string, error)

// TunnelOptions configure OpenTunnel.
type TunnelOptions struct {
	// Namespace of the Pods. Required.
	Namespace string
	// Pick chooses the Pod. Required.
	Pick PodPicker
	// Port is the Pod's port connections are forwarded to. Required.
	Port int
	// Addr is the local address to listen on; "127.0.0.1:0" (a free port
	// on loopback) if empty.
	Addr string
}

// Tunnel forwards every connection to a local address to a port of a Pod,
// through the API server's portforward subresource: the WebSocket protocol
// first, SPDY when the server does not speak it. Up to tunnelPool
// connections to the API server, to one Pod, carry the forwarded
// connections, taken in turn (one carries every stream of a parallel push
// at the pace of one TCP connection and of the one goroutine at each hop
// that reads it); when one drops (the Pod went, the API server restarted),
// all are closed and the next forwarded connection picks a Pod again, so
// the local address stays the same.
type Tunnel struct {
	ln      net.Listener
	cfg     *rest.Config
	cs      kubernetes.Interface
	opts    TunnelOptions
	closing chan struct{}
	wg      sync.WaitGroup
	reqID   atomic.Int64

	next atomic.Uint64 // the pool's slot of the next forwarded connection

	mu       sync.Mutex
	conns    [tunnelPool]httpstream.Connection // nil until dialled, or after a drop
	pod      string                            // the Pod picked last
	repick   bool                              // after a drop: pick a Pod again
	protocol string
	dials    int
	lastErr  error
}

// tunnelPool is how many connections to the API server a Tunnel spreads
// its forwarded connections over.
const tunnelPool = 4

// OpenTunnel listens on opts.Addr and connects to a Pod that opts.Pick
// chooses, before it returns: an error picking the Pod or reaching it (no
// such Pod, RBAC, an API server without port-forward) is returned here.
// Close the Tunnel when done.
func OpenTunnel(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, opts TunnelOptions) (*Tunnel, error) {
	if opts.Namespace == "" || opts.Pick == nil || opts.Port <= 0 {
		return nil, errors.New("tunnel: Namespace, Pick and Port are required")
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	t := &Tunnel{cfg: cfg, cs: cs, opts: opts, closing: make(chan struct{})}
	if _, err := t.connection(ctx, 0); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		t.drop(nil)
		return nil, fmt.Errorf("tunnel: listen: %w", err)
	}
	t.ln = ln
	t.wg.Add(1)
	go t.serve()
	return t, nil
}

// Addr is the local address (host:port) that leads to the Pod.
func (t *Tunnel) Addr() string { return t.ln.Addr().String() }

// TunnelInfo tells where a Tunnel leads.
type TunnelInfo struct {
	// Pod is the Pod of the current (or last) connection.
	Pod string
	// Protocol is ProtocolWebSocket or ProtocolSPDY.
	Protocol string
	// Dials counts the Pods picked: 1, plus one per re-connection after
	// a drop.
	Dials int
}

// Info tells where t leads now.
func (t *Tunnel) Info() TunnelInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TunnelInfo{Pod: t.pod, Protocol: t.protocol, Dials: t.dials}
}

// Close stops listening, ends the forwarded connections and the connection
// to the API server, and waits for them.
func (t *Tunnel) Close() error {
	select {
	case <-t.closing:
		return nil
	default:
	}
	close(t.closing)
	err := t.ln.Close()
	t.drop(nil)
	t.wg.Wait()
	return err
}

func (t *Tunnel) serve() {
	defer t.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return // closed
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			t.forward(c)
		}()
	}
}

// connection returns the pool's connection to the API server in slot,
// opening one when there is none (to a Pod picked again after a drop).
func (t *Tunnel) connection(ctx context.Context, slot int) (httpstream.Connection, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.conns[slot]; c != nil {
		select {
		case <-c.CloseChan():
			t.dropLocked(c) // it dropped: all go, and a Pod is picked again
		default:
			return c, nil
		}
	}
	select {
	case <-t.closing:
		return nil, net.ErrClosed
	default:
	}
	if t.pod == "" || t.repick {
		pod, err := t.opts.Pick(ctx)
		if err != nil {
			return nil, err
		}
		t.pod, t.repick = pod, false
		t.dials++
		t.wg.Add(1)
		go t.watch(pod, t.dials)
	}
	conn, protocol, err := t.dial(t.pod)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", t.opts.Namespace, t.pod, err)
	}
	t.conns[slot], t.protocol = conn, protocol
	return conn, nil
}

// podCheckEvery is how often a Tunnel checks that its Pod is still there.
const podCheckEvery = time.Second

// watch drops the pool's connections as soon as pod, picked as the
// Tunnel's dials-th, is deleted or gone: a Pod killed at once may leave its
// forwarded connections open and silent for good, and their clients
// waiting for an answer. It returns when another Pod is picked or the
// Tunnel closes.
func (t *Tunnel) watch(pod string, dials int) {
	defer t.wg.Done()
	tick := time.NewTicker(podCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.closing:
			return
		case <-tick.C:
		}
		t.mu.Lock()
		current := t.dials == dials && !t.repick
		t.mu.Unlock()
		if !current {
			return
		}
		if podGone(t.cs, t.opts.Namespace, pod) {
			t.setErr(fmt.Errorf("port-forward to pod %s/%s: the Pod is being deleted", t.opts.Namespace, pod))
			t.mu.Lock()
			if t.dials == dials {
				t.dropLocked(nil)
			}
			t.mu.Unlock()
			return
		}
	}
}

// watchPod returns true as soon as pod in ns is deleted or gone, checking
// every podCheckEvery; false when ctx ends first.
func watchPod(ctx context.Context, cs kubernetes.Interface, ns, pod string) bool {
	tick := time.NewTicker(podCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if podGone(cs, ns, pod) {
			return true
		}
	}
}

// podGone says whether pod in ns is deleted or being deleted; an API
// server that does not answer within 5 s says nothing.
func podGone(cs kubernetes.Interface, ns, pod string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
}

// drop closes the pool's connections when conn is one of them (or is nil)
// and forgets the Pod, so that the next forwarded connection picks one
// again.
func (t *Tunnel) drop(conn httpstream.Connection) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(conn)
}

func (t *Tunnel) dropLocked(conn httpstream.Connection) {
	if conn != nil && !slices.Contains(t.conns[:], conn) {
		return // dropped already
	}
	for i, c := range t.conns {
		if c != nil {
			c.Close()
			t.conns[i] = nil
		}
	}
	t.repick = true
}

// recordingDialer remembers whether it was the one that connected.
type recordingDialer struct {
	httpstream.Dialer
	used bool
}

func (d *recordingDialer) Dial(protocols ...string) (httpstream.Connection, string, error) {
	c, p, err := d.Dialer.Dial(protocols...)
	d.used = err == nil
	return c, p, err
}

// dial connects to pod's portforward subresource: WebSocket first, SPDY
// when the upgrade fails, as kubectl port-forward does.
func (t *Tunnel) dial(pod string) (httpstream.Connection, string, error) {
	dialer, webSocket, err := PortForwardDialer(t.cfg, t.opts.Namespace, pod)
	if err != nil {
		return nil, "", err
	}
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, "", err
	}
	if webSocket() {
		return conn, ProtocolWebSocket, nil
	}
	return conn, ProtocolSPDY, nil
}

// PortForwardDialer dials the portforward subresource of pod in namespace
// as kubectl port-forward does: the WebSocket protocol first, SPDY when
// the upgrade is refused. After a Dial that succeeded, webSocket tells
// whether it was the WebSocket protocol.
func PortForwardDialer(cfg *rest.Config, namespace, pod string) (dialer httpstream.Dialer, webSocket func() bool, err error) {
	u, err := podURL(cfg, namespace, pod, "portforward")
	if err != nil {
		return nil, nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		return nil, nil, err
	}
	primary := &recordingDialer{Dialer: ws}
	// client-go 0.37's WebSocket dialer reports a refused upgrade with
	// k8s.io/streaming's error type, no longer apimachinery's: ask both.
	dialer = portforward.NewFallbackDialer(primary, spdyDialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	return dialer, func() bool { return primary.used }, nil
}

// podURL is the API server's URL of subresource sub of pod (a name, or
// name:port for the proxy) in ns.
func podURL(cfg *rest.Config, ns, pod, sub string) (*url.URL, error) {
	u, _, err := rest.DefaultServerURL(cfg.Host, cfg.APIPath, schema.GroupVersion{}, rest.IsConfigTransportTLS(*cfg))
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(pod) + "/" + sub
	u.RawPath = ""
	return u, nil
}

// forward carries one local connection to the Pod. When the connection to
// the API server is gone, it opens another once; when the Pod side reports
// an error (the Pod went away), the connection to the API server is dropped
// so that the next local connection picks a Pod again.
func (t *Tunnel) forward(local net.Conn) {
	defer local.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-t.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	slot := int(t.next.Add(1) % tunnelPool)
	var (
		conn        httpstream.Connection
		errorStream httpstream.Stream
		dataStream  httpstream.Stream
		err         error
	)
	for attempt := 0; attempt < 2; attempt++ {
		if conn, err = t.connection(ctx, slot); err != nil {
			t.setErr(err)
			return
		}
		if errorStream, dataStream, err = t.streams(conn); err == nil {
			break
		}
		t.drop(conn) // a stale connection: open another, once
	}
	if err != nil {
		t.setErr(err)
		return
	}
	cancel()
	defer conn.RemoveStreams(errorStream, dataStream)

	errc := make(chan []byte, 1)
	go func() {
		msg, _ := io.ReadAll(io.LimitReader(errorStream, 64<<10))
		errc <- msg
	}()
	remoteDone := make(chan struct{})
	go func() {
		io.Copy(local, dataStream)
		close(remoteDone)
	}()
	localDone := make(chan struct{})
	go func() {
		io.Copy(dataStream, local)
		dataStream.Close() // no more data from us
		close(localDone)
	}()
	select {
	case <-remoteDone:
	case <-localDone:
		// The local side finished writing; wait for the answer.
		select {
		case <-remoteDone:
		case <-t.closing:
		}
	case <-t.closing:
	}
	// The local side learns at once that the connection ended: it must not
	// wait for the error stream, which a broken connection never closes.
	local.Close()
	dataStream.Reset()
	select {
	case msg := <-errc:
		if len(msg) > 0 {
			t.setErr(errors.New(string(msg)))
			t.drop(conn)
		}
	case <-time.After(errorStreamWait):
		// The Pod side never said how the connection ended: the connection
		// to the API server is not to be trusted any more.
		t.setErr(fmt.Errorf("port-forward to pod %s/%s: no word on the error stream %s after the connection ended", t.opts.Namespace, t.Info().Pod, errorStreamWait))
		t.drop(conn)
	case <-t.closing:
	}
}

// errorStreamWait bounds the wait for the error stream after a forwarded
// connection ended.
const errorStreamWait = 5 * time.Second

// streams opens the error and data streams of one forwarded connection.
func (t *Tunnel) streams(conn httpstream.Connection) (httpstream.Stream, httpstream.Stream, error) {
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(t.opts.Port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(t.reqID.Add(1), 10))
	errorStream, err := conn.CreateStream(h)
	if err != nil {
		return nil, nil, err
	}
	errorStream.Close() // nothing to send on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	dataStream, err := conn.CreateStream(h)
	if err != nil {
		conn.RemoveStreams(errorStream)
		return nil, nil, err
	}
	return errorStream, dataStream, nil
}

func (t *Tunnel) setErr(err error) {
	t.mu.Lock()
	t.lastErr = err
	t.mu.Unlock()
}

// Err is the last error of a forwarded connection (picking or reaching a
// Pod, or what the Pod side reported), or nil: the local side only sees
// its connection closed.
func (t *Tunnel) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}
