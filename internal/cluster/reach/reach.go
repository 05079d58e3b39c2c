// Package reach opens the way from where ferry runs to the in-cluster
// registry: its NodePort on 127.0.0.1 when ferry runs on a node and that
// leads to the registry, else a tunnel through the API server to a ready
// registry Pod, open for as long as the command needs it. A workstation
// with a kubeconfig and no route to the nodes reaches the registry the
// second way. The tunnel is the API server's pods/proxy subresource (HTTP
// relayed to the Pod's IP) when the user may use it and it reaches the
// registry, else a port-forward (a byte stream relayed through the kubelet,
// slower: docs/performance.md).
package reach

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/unreachable"
)

// Via says how ferry reaches the in-cluster registry.
type Via string

// The ways to the registry.
const (
	// Auto tries the NodePort for ProbeTimeout, then opens a tunnel.
	Auto Via = "auto"
	// NodePort is 127.0.0.1:<NodePort>: ferry runs on a node.
	NodePort Via = "nodeport"
	// Tunnel is a way through the API server to a ready registry Pod: its
	// pods/proxy subresource, else a port-forward.
	Tunnel Via = "tunnel"
	// PortForward is a Tunnel that is always a port-forward (for an API
	// server that cannot reach Pods' IPs, whose pods/proxy waits long
	// before it fails).
	PortForward Via = "port-forward"
)

// Tunnels says whether v always goes through the API server (Tunnel,
// PortForward).
func (v Via) Tunnels() bool { return v == Tunnel || v == PortForward }

// ParseVia reads a Via from a flag: auto, nodeport, tunnel or
// port-forward.
func ParseVia(s string) (Via, error) {
	switch v := Via(s); v {
	case Auto, NodePort, Tunnel, PortForward:
		return v, nil
	}
	return "", fmt.Errorf("%q: %w", s, ErrVia)
}

// DefaultProbeTimeout bounds Auto's check of the NodePort: on a node it
// answers at once, elsewhere the connection is refused at once or never
// answers.
const DefaultProbeTimeout = time.Second

// The causes of a failure to reach the registry, wrapped by Registry's
// errors, which name the fix.
var (
	// ErrVia means a Via is not one of auto, nodeport, tunnel or
	// port-forward.
	ErrVia = errors.New("not auto, nodeport, tunnel or port-forward")
	// ErrNoRegistry means ferry init has not set a registry up.
	ErrNoRegistry = errors.New("no in-cluster registry")
	// ErrNoReadyPod means the registry has no ready Pod to tunnel to.
	ErrNoReadyPod = errors.New("no ready registry Pod")
	// ErrForbidden means RBAC denies the port-forward (and the proxy).
	ErrForbidden = errors.New("not allowed to port-forward to ferry's Pods")
	// ErrNoAgent means ferry init has not set the agent up; ErrNoReadyAgent
	// that it has no ready Pod.
	ErrNoAgent      = errors.New("no ferry agent")
	ErrNoReadyAgent = errors.New("no ready agent Pod")
)

// Options configure Registry. The zero value reads the registry's address
// from ferry's namespace and tries the NodePort, then a tunnel.
type Options struct {
	// Via is the way to take; Auto if empty.
	Via Via
	// Namespace is ferry's namespace; cluster.DefaultNamespace if empty.
	Namespace string
	// Config is the REST configuration of the tunnel; required unless Via
	// is NodePort.
	Config *rest.Config
	// NodeHost is the registry's address on the nodes,
	// cluster.RegistryHost(nodePort); if empty, the State that ferry init
	// recorded says it.
	NodeHost string
	// ProbeTimeout bounds Auto's check of the NodePort;
	// DefaultProbeTimeout if ≤ 0.
	ProbeTimeout time.Duration
	// Addr is the tunnel's local address; a free port on 127.0.0.1 if
	// empty.
	Addr string
}

// Endpoint is an open way to the registry. Close it when done.
type Endpoint struct {
	// Host is where ferry reaches the registry: host:port, on loopback.
	Host string `json:"host"`
	// Via is the way taken: NodePort or Tunnel (PortForward is reported as
	// Tunnel).
	Via Via `json:"via"`
	// NodeHost is the registry's address on the nodes, which Pods pull from.
	NodeHost string `json:"nodeHost"`
	// Pod is the registry Pod a tunnel leads to, Protocol the tunnel's
	// protocol (kube.ProtocolProxy, kube.ProtocolWebSocket or
	// kube.ProtocolSPDY).
	Pod      string `json:"pod,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	// NodePortError says, for Auto, why the NodePort was not taken;
	// ProxyError, for a port-forward, why the pods/proxy was not.
	NodePortError string `json:"nodePortError,omitempty"`
	ProxyError    string `json:"proxyError,omitempty"`
	// Seconds is how long opening the way took.
	Seconds float64 `json:"seconds"`

	tunnel tunnel
}

// tunnel is a kube.Tunnel or a kube.PodProxy.
type tunnel interface {
	Addr() string
	Info() kube.TunnelInfo
	Err() error
	Close() error
}

// String tells the way in one line, e.g. "127.0.0.1:41234 (tunnel to pod
// ferry/ferry-registry-5d9c-x2 over websocket, 0.08s)".
func (e *Endpoint) String() string {
	if e.Via != Tunnel {
		return fmt.Sprintf("%s (nodeport)", e.Host)
	}
	return fmt.Sprintf("%s (tunnel to pod %s over %s, %.2fs)", e.Host, e.Pod, e.Protocol, e.Seconds)
}

// MarshalJSON adds to the fields the tunnel's dials (see Dials).
func (e *Endpoint) MarshalJSON() ([]byte, error) {
	type plain Endpoint
	return json.Marshal(struct {
		*plain
		Dials int `json:"dials,omitempty"`
	}{(*plain)(e), e.Dials()})
}

// Dials counts the tunnel's connections to the API server: 1, plus one per
// re-connection after a drop; 0 for the NodePort.
func (e *Endpoint) Dials() int {
	if e.tunnel == nil {
		return 0
	}
	return e.tunnel.Info().Dials
}

// Err is the tunnel's last error forwarding a connection, if any: the
// client of Host only sees its connection closed.
func (e *Endpoint) Err() error {
	if e.tunnel == nil {
		return nil
	}
	return e.tunnel.Err()
}

// Close closes the tunnel, if any.
func (e *Endpoint) Close() error {
	if e.tunnel == nil {
		return nil
	}
	return e.tunnel.Close()
}

// Registry opens the way to the registry in opts.Namespace that ferry init
// set up. Its errors name the cause (ErrNoRegistry, ErrNoReadyPod,
// ErrForbidden, the API server's) in one line; the command line adds the fix.
func Registry(ctx context.Context, cs kubernetes.Interface, opts Options) (*Endpoint, error) {
	start := time.Now()
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.Via == "" {
		opts.Via = Auto
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.NodeHost == "" {
		s, err := cs.CoreV1().Secrets(opts.Namespace).Get(ctx, cluster.StateName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w in namespace %s", ErrNoRegistry, opts.Namespace)
		}
		if err != nil {
			return nil, fmt.Errorf("read the registry's state: %w", unreachable.Said(err))
		}
		opts.NodeHost = cluster.StateFromData(s.Data).Registry
	}
	ep := &Endpoint{Host: opts.NodeHost, NodeHost: opts.NodeHost, Via: NodePort}
	switch opts.Via {
	case NodePort:
		return ep, nil
	case Auto:
		err := probe(ctx, opts.NodeHost, opts.ProbeTimeout)
		if err == nil {
			ep.Seconds = time.Since(start).Seconds()
			return ep, nil
		}
		ep.NodePortError = err.Error()
	case Tunnel, PortForward:
	default:
		return nil, fmt.Errorf("reach: unknown way %q", opts.Via)
	}
	var t tunnel
	if opts.Via != PortForward {
		px, err := openProxy(ctx, cs, opts.Config, opts.Namespace, opts.Addr)
		switch {
		case err == nil:
			t = px
		case errors.Is(err, ErrNoRegistry) || errors.Is(err, ErrNoReadyPod):
			return nil, err // a port-forward would find no Pod either
		default:
			ep.ProxyError = err.Error()
		}
	}
	if t == nil {
		pf, err := openTunnel(ctx, cs, opts.Config, opts.Namespace, opts.Addr, registryPods, cluster.RegistryPort)
		if err != nil {
			if ep.ProxyError != "" {
				return nil, fmt.Errorf("%w (and %s)", err, ep.ProxyError)
			}
			return nil, err
		}
		t = pf
	}
	info := t.Info()
	ep.Host, ep.Via, ep.Pod, ep.Protocol, ep.tunnel = t.Addr(), Tunnel, opts.Namespace+"/"+info.Pod, info.Protocol, t
	ep.Seconds = time.Since(start).Seconds()
	return ep, nil
}

// Agent opens a tunnel to port of a ready Pod of ferry's agent in
// namespace ns (its Deployment's name and its Pods' labels), for the
// agent's HTTPS endpoint; Endpoint.Host is its local address.
func Agent(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, ns, deployment string, podLabels map[string]string, port int) (*Endpoint, error) {
	start := time.Now()
	p := pods{what: "agent", deployment: deployment, labels: podLabels, none: ErrNoAgent, notReady: ErrNoReadyAgent}
	t, err := openTunnel(ctx, cs, cfg, ns, "", p, port)
	if err != nil {
		return nil, err
	}
	info := t.Info()
	return &Endpoint{Host: t.Addr(), Via: Tunnel, Pod: ns + "/" + info.Pod, Protocol: info.Protocol, Seconds: time.Since(start).Seconds(), tunnel: t}, nil
}

// openTunnel opens a tunnel to port of a ready Pod of p in ns, listening
// on addr; its errors name the cause and the fix.
func openTunnel(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, ns, addr string, p pods, port int) (*kube.Tunnel, error) {
	if cfg == nil {
		return nil, errors.New("reach: a tunnel needs the REST configuration (Options.Config)")
	}
	if err := mayPortForward(ctx, cs, ns); err != nil {
		return nil, err
	}
	t, err := kube.OpenTunnel(ctx, cfg, cs, kube.TunnelOptions{
		Namespace: ns, Port: port, Addr: addr,
		Pick: func(ctx context.Context) (string, error) { return p.ready(ctx, cs, ns) },
	})
	if err != nil {
		if strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "Forbidden") || strings.Contains(err.Error(), "forbidden") {
			return nil, fmt.Errorf("%w in namespace %s (%v)", ErrForbidden, ns, err)
		}
		if errors.Is(err, p.none) || errors.Is(err, p.notReady) {
			return nil, err
		}
		return nil, fmt.Errorf("tunnel to the %s: %w", p.what, err)
	}
	return t, nil
}

// proxyVerbs are the verbs on pods/proxy a registry client needs: the
// API server authorizes a proxied request by its method (HEAD and GET:
// get, POST: create, PUT: update, PATCH: patch, DELETE: delete).
var proxyVerbs = []string{"get", "create", "update", "patch", "delete"}

// proxyProbeTimeout bounds the first request through the pods/proxy: an
// API server that cannot reach the Pod's IP may try for 30 s.
const proxyProbeTimeout = 3 * time.Second

// openProxy opens a kube.PodProxy to a ready registry Pod in ns, listening
// on addr, when RBAC allows it and its first request (GET /v2/) is
// answered by ferry's registry; else it says why not.
func openProxy(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, ns, addr string) (*kube.PodProxy, error) {
	if cfg == nil {
		return nil, errors.New("reach: a tunnel needs the REST configuration (Options.Config)")
	}
	for _, verb := range proxyVerbs {
		if err := may(ctx, cs, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "pods", Subresource: "proxy"}); err != nil {
			return nil, fmt.Errorf("pods/proxy: %w", err)
		}
	}
	px, err := kube.OpenPodProxy(ctx, cfg, cs, kube.PodProxyOptions{
		Namespace: ns, Port: cluster.RegistryPort, Addr: addr,
		Pick:       func(ctx context.Context) (string, error) { return registryPods.ready(ctx, cs, ns) },
		AuthHeader: cluster.ForwardedAuthHeader,
		FromPod:    cluster.FromRegistry,
	})
	if err != nil {
		return nil, err
	}
	if err := probeProxy(ctx, px.Addr()); err != nil {
		px.Close()
		if perr := px.Err(); perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("pods/proxy to pod %s: %w", px.Info().Pod, err)
	}
	return px, nil
}

// probeProxy makes a first request through a PodProxy at host, which ends
// the connection when the answer is not the registry's.
func probeProxy(ctx context.Context, host string) error {
	_, err := getV2(ctx, host, proxyProbeTimeout)
	return err
}

// probe checks that host answers an anonymous GET /v2/ as ferry's registry
// does (401: it wants the account) within timeout.
func probe(ctx context.Context, host string, timeout time.Duration) error {
	resp, err := getV2(ctx, host, timeout)
	if err != nil {
		return fmt.Errorf("%s: %w", host, errors.Unwrap(err))
	}
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("%s answers %s, not the registry's 401", host, resp.Status)
	}
	return nil
}

// getV2 makes an anonymous GET /v2/ at host, on a connection of its own,
// within timeout; the answer's body is closed.
func getV2(ctx context.Context, host string, timeout time.Duration) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/v2/", nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// mayPortForward asks the API server whether this user may port-forward to
// Pods in ns; a review that cannot be made is no answer.
func mayPortForward(ctx context.Context, cs kubernetes.Interface, ns string) error {
	for _, ra := range []authorizationv1.ResourceAttributes{
		{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "portforward"},
		{Namespace: ns, Verb: "list", Resource: "pods"},
	} {
		if err := may(ctx, cs, ra); err != nil {
			return fmt.Errorf("%w in namespace %s: %w", ErrForbidden, ns, err)
		}
	}
	return nil
}

// may asks the API server whether this user may do ra; a review that
// cannot be made is no answer.
func may(ctx context.Context, cs kubernetes.Interface, ra authorizationv1.ResourceAttributes) error {
	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
	}, metav1.CreateOptions{})
	if err != nil || r == nil || r.Status.Allowed {
		return nil
	}
	what := ra.Verb + " " + ra.Resource
	if ra.Subresource != "" {
		what += "/" + ra.Subresource
	}
	return fmt.Errorf("RBAC denies `%s`", what)
}

// pods names the Pods of one of ferry's Deployments a tunnel leads to.
type pods struct {
	what       string // "registry", "agent"
	deployment string
	labels     map[string]string
	// none and notReady are the errors that say there is no Deployment,
	// or no ready Pod.
	none, notReady error
}

var registryPods = pods{what: "registry", deployment: cluster.RegistryName, labels: cluster.RegistryLabels(), none: ErrNoRegistry, notReady: ErrNoReadyPod}

// ready picks a ready Pod of p in ns, or says why there is none.
func (p pods) ready(ctx context.Context, cs kubernetes.Interface, ns string) (string, error) {
	sel := labels.SelectorFromSet(p.labels).String()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return "", fmt.Errorf("list %s Pods: %w", p.what, err)
	}
	var ready, other []corev1.Pod
	for _, p := range list.Items {
		switch {
		case p.DeletionTimestamp != nil:
		case p.Status.Phase == corev1.PodRunning && kube.PodReady(&p):
			ready = append(ready, p)
		default:
			other = append(other, p)
		}
	}
	if len(ready) > 0 {
		slices.SortFunc(ready, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		return ready[0].Name, nil
	}
	if len(list.Items) == 0 {
		if _, err := cs.AppsV1().Deployments(ns).Get(ctx, p.deployment, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w in namespace %s", p.none, ns)
		}
	}
	pl := other
	if len(pl) == 0 {
		pl = list.Items // every Pod is terminating
	}
	var why []string
	for _, p := range pl {
		why = append(why, podWhy(ctx, cs, &p))
		if len(why) == 2 {
			break
		}
	}
	if len(why) == 0 {
		why = append(why, "no Pod")
	}
	return "", fmt.Errorf("%w in namespace %s (%s)", p.notReady, ns, strings.Join(why, "; "))
}

// podWhy says in a few words why a registry Pod does not serve.
func podWhy(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	s := "pod " + p.Name
	if p.DeletionTimestamp != nil {
		s += " terminating"
	} else {
		s += " " + strings.ToLower(string(p.Status.Phase))
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && w.Reason != "" {
				s += " (" + w.Reason + ")"
			}
		}
	}
	node := p.Spec.NodeName
	if node == "" {
		return s + ", not scheduled"
	}
	s += " on node " + node
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return s + ", which is gone"
	case err != nil:
		return s
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			s += ", which is NotReady"
		}
	}
	if n.Spec.Unschedulable {
		s += ", which is cordoned"
	}
	return s
}
