package upload

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// ErrNoToken means the kubeconfig's user has no bearer token to present to
// the agent (it authenticates with a client certificate, which the agent
// cannot check).
var ErrNoToken = errors.New("the upload endpoint authenticates a bearer token, and this kubeconfig's user has none (a client certificate cannot be passed on)")

// Client uploads packages to a cluster's agent, through a tunnel (a
// port-forward through the API server) to an agent Pod.
type Client struct {
	http  *http.Client
	base  string
	token string
	// bearer: the transport adds the kubeconfig's token.
	bearer bool
	ep     *reach.Endpoint
}

// Connect opens a tunnel to a ready agent Pod in ferry's namespace ns and
// returns a Client that presents cfg's bearer token (a token, a token file,
// or what an exec or auth-provider plugin gives). The agent's certificate
// is checked against its CA (the cluster.AgentCAConfigMap ConfigMap). Close the
// Client when done.
func Connect(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns string) (*Client, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cluster.AgentCAConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the agent's CA (ConfigMap %s/%s): %w", ns, cluster.AgentCAConfigMap, cluster.NotSetUp(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data[cluster.AgentCAKey])) {
		return nil, fmt.Errorf("ConfigMap %s/%s holds no PEM certificate at %s", ns, cluster.AgentCAConfigMap, cluster.AgentCAKey)
	}
	ep, err := reach.Agent(ctx, cs, cfg, ns, cluster.AgentName, cluster.AgentLabels(), cluster.AgentPort)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil,
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: cluster.AgentServiceHost(ns), MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 20 * time.Second,
	}
	var rt http.RoundTripper = tr
	bearer := cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil
	// The token a request to the API server would carry (a plugin's
	// included), without the client certificate.
	if bearer {
		tc := rest.AnonymousClientConfig(cfg)
		tc.BearerToken, tc.BearerTokenFile, tc.ExecProvider, tc.AuthProvider = cfg.BearerToken, cfg.BearerTokenFile, cfg.ExecProvider, cfg.AuthProvider
		tc.Impersonate = cfg.Impersonate
		if rt, err = rest.HTTPWrappersForConfig(tc, tr); err != nil {
			ep.Close()
			return nil, err
		}
	}
	return &Client{http: &http.Client{Transport: rt}, base: "https://" + ep.Host, bearer: bearer, ep: ep}, nil
}

// As returns a Client that presents token instead (the dashboard acting
// for a user who logged in with theirs); it shares c's tunnel.
func (c *Client) As(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// Endpoint is the tunnel the Client goes through.
func (c *Client) Endpoint() *reach.Endpoint { return c.ep }

// Close closes the tunnel.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	if c.ep == nil {
		return nil
	}
	return c.ep.Close()
}

// Upload streams a package archive (.tar or .tar.zst) to the agent and
// follows what it does with it, calling event (if set) with each Event.
// It returns the Result, or the agent's one-line reason for refusing.
func (c *Client) Upload(ctx context.Context, body io.Reader, opts Options, event func(Event)) (*Result, error) {
	if c.token == "" && !c.bearer {
		return nil, ErrNoToken
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+Path+"?"+opts.query().Encode(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", MediaTypeEvents)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if c.ep != nil && c.ep.Err() != nil {
			return nil, fmt.Errorf("upload to the agent: %w (tunnel: %v)", err, c.ep.Err())
		}
		return nil, fmt.Errorf("upload to the agent: %w", err)
	}
	defer resp.Body.Close()
	return ReadEvents(resp, event)
}

// ReadEvents reads an upload's response: the agent's one-line refusal for
// a status other than 200, else its events until the result or an error.
func ReadEvents(resp *http.Response, event func(Event)) (*Result, error) {
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = resp.Status
		}
		return nil, &Refused{Status: resp.StatusCode, Message: msg}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("the agent's answer: %w", err)
		}
		if event != nil {
			event(e)
		}
		switch e.Phase {
		case PhaseError:
			return e.Result, &Refused{Status: http.StatusOK, Message: e.Error}
		case PhaseDone:
			if e.Result == nil {
				return nil, errors.New("the agent's answer: done without a result")
			}
			return e.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the agent's answer broke off: %w", err)
	}
	return nil, errors.New("the agent's answer ended before the upload did")
}

// Refused is the agent's answer when it did not take, or did not finish,
// an upload: the HTTP status (200 when it failed after the stream began)
// and its one-line reason.
type Refused struct {
	Status  int
	Message string
}

func (e *Refused) Error() string {
	if e.Status == http.StatusOK {
		return "the agent: " + e.Message
	}
	return fmt.Sprintf("the agent refused the upload (%d %s): %s", e.Status, http.StatusText(e.Status), e.Message)
}

// query encodes opts for the request's URL.
func (o Options) query() url.Values {
	q := url.Values{}
	for _, c := range o.Components {
		q.Add("component", c)
	}
	for _, s := range o.Set {
		q.Add("set", s)
	}
	if o.Timeout > 0 {
		q.Set("timeout", o.Timeout.String())
	}
	if o.NoWait {
		q.Set("wait", "false")
	}
	if o.Source != "" {
		q.Set("source", filepath.Base(o.Source))
	}
	return q
}

// ParseOptions decodes the Options a request's URL carries.
func ParseOptions(q url.Values) (Options, error) {
	o := Options{Components: q["component"], Set: q["set"], Source: q.Get("source")}
	if len(o.Source) > 255 || strings.ContainsAny(o.Source, "/\x00\n\r") {
		return o, fmt.Errorf("source %.64q: want the archive's file name", o.Source)
	}
	if t := q.Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d < 0 {
			return o, fmt.Errorf("timeout %.64q: not a duration", t)
		}
		o.Timeout = d
	}
	switch q.Get("wait") {
	case "", "true":
	case "false":
		o.NoWait = true
	default:
		return o, fmt.Errorf("wait %.64q: true or false", q.Get("wait"))
	}
	return o, nil
}
