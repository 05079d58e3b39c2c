package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ProtocolProxy is the API server's pods/proxy subresource, as
// PodProxyInfo reports it: plain HTTP relayed by the API server to the
// Pod's IP.
const ProtocolProxy = "pods/proxy"

// PodProxyOptions configure OpenPodProxy.
type PodProxyOptions struct {
	// Namespace of the Pods. Required.
	Namespace string
	// Pick chooses the Pod. Required.
	Pick PodPicker
	// Port is the Pod's port requests are sent to. Required.
	Port int
	// Addr is the local address to listen on; "127.0.0.1:0" if empty.
	Addr string
	// AuthHeader, when set, is the header each request's Authorization is
	// carried to the Pod in: the API server takes the standard one for
	// its own authentication and removes it.
	AuthHeader string
	// FromPod tells an answer of the Pod from one of the API server (the
	// Pod could not be reached, the proxy is forbidden). Required.
	FromPod func(*http.Response) bool
}

// PodProxy serves HTTP on a local address and sends every request to a
// port of a Pod through the API server's pods/proxy subresource, which
// relays it as plain HTTP to the Pod's IP: one hop, where a port-forward
// (Tunnel) relays a byte stream through the API server, the kubelet and
// the container runtime, translating its protocol twice, which made a
// push through a port-forward several times slower than through the
// NodePort, with the API server busy relaying it (docs/performance.md).
//
// An answer that does not come from the Pod (FromPod) — the Pod went
// away, the API server cannot reach it — ends the local connection, as a
// Tunnel whose Pod went away does: the client sees a broken connection
// (which a push retries, resuming), Err says why, and the next request
// picks a Pod again. Redirects (Location) of the Pod lead back through the
// local address.
type PodProxy struct {
	ln      net.Listener
	srv     *http.Server
	cfg     *rest.Config
	cs      kubernetes.Interface
	api     *url.URL // the API server: its scheme and host
	opts    PodProxyOptions
	rp      *httputil.ReverseProxy
	closing chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	pod     podTarget
	gone    context.Context // cancelled when pod is deleted or an answer says it is unreachable
	goneNow context.CancelFunc
	picks   int
	lastErr error
}

// podProxyKey is the request context's key for the podTarget a request
// goes to.
type podProxyKey struct{}

// podTarget is a Pod picked, and the API server's path to its port's
// proxy.
type podTarget struct {
	name, prefix string
}

// OpenPodProxy listens on opts.Addr and picks a Pod before it returns; an
// error picking one is returned here. It makes no request: whether the API
// server reaches the Pod shows in the first answer (FromPod). Close the
// PodProxy when done.
func OpenPodProxy(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, opts PodProxyOptions) (*PodProxy, error) {
	if opts.Namespace == "" || opts.Pick == nil || opts.Port <= 0 || opts.FromPod == nil {
		return nil, errors.New("pod proxy: Namespace, Pick, Port and FromPod are required")
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("pod proxy: %w", err)
	}
	p := &PodProxy{cfg: cfg, cs: cs, opts: opts, closing: make(chan struct{})}
	if p.api, err = podURL(cfg, opts.Namespace, "", ""); err != nil {
		return nil, fmt.Errorf("pod proxy: %w", err)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      rt,
		FlushInterval:  -1, // each write of an answer is passed on at once
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.fail,
		ErrorLog:       discardLog,
	}
	if _, _, err := p.current(ctx); err != nil {
		p.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("pod proxy: listen: %w", err)
	}
	p.ln = ln
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: time.Minute, ErrorLog: discardLog}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.srv.Serve(ln)
	}()
	return p, nil
}

// Addr is the local address (host:port) that leads to the Pod.
func (p *PodProxy) Addr() string { return p.ln.Addr().String() }

// Info tells where p leads now: Pod, ProtocolProxy, and in Dials the Pods
// picked (1, plus one per pick after the Pod went away).
func (p *PodProxy) Info() TunnelInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return TunnelInfo{Pod: p.pod.name, Protocol: ProtocolProxy, Dials: p.picks}
}

// Err is the last error of a request (picking or reaching a Pod, or what
// the API server answered in its place), or nil.
func (p *PodProxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Close stops listening, ends the requests in flight and waits for them.
func (p *PodProxy) Close() error {
	select {
	case <-p.closing:
		return nil
	default:
	}
	close(p.closing)
	p.mu.Lock()
	if p.goneNow != nil {
		p.goneNow()
	}
	p.mu.Unlock()
	var err error
	if p.srv != nil {
		err = p.srv.Close()
	}
	p.wg.Wait()
	return err
}

func (p *PodProxy) setErr(err error) {
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
}

// current returns the Pod requests go to and a context cancelled when it
// goes away, picking one when there is none or the last went away.
func (p *PodProxy) current(ctx context.Context) (podTarget, context.Context, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone != nil && p.gone.Err() == nil {
		return p.pod, p.gone, nil
	}
	select {
	case <-p.closing:
		return podTarget{}, nil, net.ErrClosed
	default:
	}
	pod, err := p.opts.Pick(ctx)
	if err != nil {
		return podTarget{}, nil, err
	}
	u, err := podURL(p.cfg, p.opts.Namespace, pod+":"+strconv.Itoa(p.opts.Port), "proxy")
	if err != nil {
		return podTarget{}, nil, err
	}
	p.pod, p.picks = podTarget{name: pod, prefix: u.Path}, p.picks+1
	p.gone, p.goneNow = context.WithCancel(context.Background())
	p.wg.Add(1)
	go func(gone context.Context, cancel context.CancelFunc) {
		defer p.wg.Done()
		if watchPod(gone, p.cs, p.opts.Namespace, pod) {
			p.setErr(fmt.Errorf("pods/proxy to pod %s/%s: the Pod is being deleted", p.opts.Namespace, pod))
			cancel()
		}
	}(p.gone, p.goneNow)
	return p.pod, p.gone, nil
}

// away marks pod gone: the next request picks a Pod again.
func (p *PodProxy) away(pod podTarget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pod == pod && p.goneNow != nil {
		p.goneNow()
	}
}

func (p *PodProxy) serve(w http.ResponseWriter, r *http.Request) {
	// The path goes after the Pod's proxy path, with this user's
	// credentials: a dot segment would lead elsewhere in the API server.
	segs := strings.Split(r.URL.Path, "/")
	if !strings.HasPrefix(r.URL.Path, "/") || slices.Contains(segs, "..") || slices.Contains(segs, ".") {
		http.Error(w, "pods/proxy: a path with dot segments is not forwarded", http.StatusBadRequest)
		return
	}
	pod, gone, err := p.current(r.Context())
	if err != nil {
		p.setErr(err)
		panic(http.ErrAbortHandler) // as a Tunnel does: the connection ends
	}
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), podProxyKey{}, pod))
	defer cancel()
	stop := context.AfterFunc(gone, cancel) // the Pod went away: so does this request
	defer stop()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

func (p *PodProxy) rewrite(pr *httputil.ProxyRequest) {
	pod, _ := pr.In.Context().Value(podProxyKey{}).(podTarget)
	out := pr.Out
	out.URL.Scheme, out.URL.Host = p.api.Scheme, p.api.Host
	out.URL.Path = pod.prefix + pr.In.URL.Path
	out.URL.RawPath = pod.prefix + pr.In.URL.EscapedPath()
	out.Host = ""
	if p.opts.AuthHeader != "" {
		out.Header.Del(p.opts.AuthHeader)
		if a := out.Header.Get("Authorization"); a != "" {
			out.Header.Set(p.opts.AuthHeader, a)
		}
	}
	out.Header.Del("Authorization") // the transport sets the API server's own
}

// errNotFromPod is modifyResponse's error for an answer of the API server
// in the Pod's place.
type errNotFromPod struct {
	status string
	msg    string
}

func (e *errNotFromPod) Error() string {
	s := "the answer (" + e.status + ") is not the Pod's (an API server's own, or a Pod that does not mark its answers)"
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

func (p *PodProxy) modifyResponse(resp *http.Response) error {
	if !p.opts.FromPod(resp) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return &errNotFromPod{status: resp.Status, msg: oneLine(statusMessage(b))}
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		pod, _ := resp.Request.Context().Value(podProxyKey{}).(podTarget)
		resp.Header.Set("Location", p.local(loc, pod.prefix))
	}
	return nil
}

// local makes a Location of the Pod's answer lead through the local
// address: a URL under the API server's proxy path prefix (the API
// server rewrites the Pod's own URLs so), or on the API server's host (a
// Pod that built it from X-Forwarded-Host), becomes a path on the local
// address. Others are left as they are.
func (p *PodProxy) local(loc, prefix string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return loc
	}
	switch {
	case u.Path == prefix || strings.HasPrefix(u.Path, prefix+"/"):
		u.Path = strings.TrimPrefix(u.Path, prefix)
		u.RawPath = ""
	case u.Host == "" || u.Host == p.api.Host:
	default:
		return loc
	}
	u.Scheme, u.Host, u.User = "", "", nil
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}

// fail ends the local connection: the Pod did not answer.
func (p *PodProxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	pod, _ := r.Context().Value(podProxyKey{}).(podTarget)
	select {
	case <-p.closing:
		panic(http.ErrAbortHandler)
	default:
	}
	if errors.Is(err, context.Canceled) {
		panic(http.ErrAbortHandler) // the client left, or the Pod went (watchPod said so)
	}
	p.setErr(fmt.Errorf("pods/proxy to pod %s/%s: %w", p.opts.Namespace, pod.name, err))
	p.away(pod)
	panic(http.ErrAbortHandler)
}

// statusMessage is the message of a Kubernetes Status in b, or b itself.
func statusMessage(b []byte) string {
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return st.Message
	}
	return string(b)
}

// discardLog takes the log lines of net/http and httputil: errors are
// reported through Err.
var discardLog = log.New(io.Discard, "", 0)
