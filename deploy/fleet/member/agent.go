package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Defaults of an Agent.
const (
	// DefaultPoll is how often the agent reads its Secret when it has
	// nothing else to do: a join written by the CLI starts within it.
	DefaultPoll = 5 * time.Second
	// MinInterval and MaxInterval bound the heartbeat the centre asks for.
	MinInterval = 5 * time.Second
	MaxInterval = time.Hour
	// MaxJoinBackoff bounds the wait between joins that fail with the same
	// token.
	MaxJoinBackoff = 5 * time.Minute
	// MaxRetryBackoff bounds the wait before a package whose deploy failed
	// (not refused) is tried again.
	MaxRetryBackoff = 10 * time.Minute
	// ReceiptMaxAge is how long the receipt of the registry is kept before
	// it is made again (it is made again after every deploy and deletion).
	ReceiptMaxAge = 10 * time.Minute
	// lastSyncEvery is how often a successful heartbeat is written into
	// the Secret (lastSync).
	lastSyncEvery = time.Minute
	// DefaultRequestTimeout bounds a join's or a sync's exchange with the
	// centre: its answer whole.
	DefaultRequestTimeout = 2 * time.Minute
	// DefaultStallTimeout is how long a bundle may send nothing once it
	// has begun.
	DefaultStallTimeout = time.Minute
)

// Agent is a member's loop, run by `ferry agent`: it idles without the
// Secret SecretName, joins when the Secret holds a token and no
// credential, and once joined syncs every interval the centre gives. Its
// zero value is not usable: Client, Packages are required.
type Agent struct {
	// Client reaches the member cluster's core API; Packages its Package
	// API.
	Client   kubernetes.Interface
	Packages client.WithWatch
	// Namespace is ferry's; cluster.DefaultNamespace if empty.
	Namespace string
	// Registry is where this process reaches the in-cluster registry
	// (host:port), for the receipt and the push; the registry Service's
	// cluster IP and port if empty. It is spoken to as deploy.Deploy
	// speaks to it: plain HTTP, with the registry's account.
	Registry string
	// Spool is the folder bundles are written to while they are verified
	// and deployed; os.TempDir() if empty.
	Spool string
	// MaxBundle bounds a bundle's size; no bound but the disk's if 0.
	MaxBundle int64
	// RequestTimeout bounds a join's or a sync's exchange with the
	// centre; DefaultRequestTimeout if ≤ 0. A bundle is bounded by
	// StallTimeout instead: it is cut off once no byte of it has come for
	// that long (DefaultStallTimeout if ≤ 0), and its answer must begin
	// within the client's wait for headers (a minute).
	RequestTimeout, StallTimeout time.Duration
	// Version is ferry's, reported to the centre.
	Version string
	// Logger receives a line per join, deploy, refusal and failure; nil
	// discards.
	Logger *slog.Logger
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// Poll: DefaultPoll if ≤ 0.
	Poll time.Duration
	// HTTPClient makes the client that speaks to the centre from the TLS
	// configuration that pins its CA (wire.PinnedTLS); nil: wire.Client's
	// own. Tests set it; the pin holds either way.
	HTTPClient func(*tls.Config) *http.Client

	mu sync.Mutex
	st agentState
}

// agentState is what the agent remembers between steps.
type agentState struct {
	// identity is the credential the rest was learnt under.
	identity string
	conn     *wire.Client
	connKey  string
	// join backoff, for the join inputs joinKey.
	joinKey  string
	joinNext time.Time
	joinWait time.Duration
	// nextSync is when the next heartbeat is due; interval the centre's.
	nextSync time.Time
	interval time.Duration
	// lastSyncWritten is when lastSync was last written.
	lastSyncWritten time.Time
	// receipts of the registry by repository ("" for all of it), whether
	// a deploy or deletion made them stale, and the hash of the last one
	// the centre took.
	receipts    map[string]receipt
	stale       bool
	receiptSent string
	// desired is the last desired state, by package name; invalid the
	// refusals of its entries that do not check.
	desired map[string]wire.DesiredPackage
	invalid map[string]outcome
	// refused are refusals by package name (of outcome.digest, with the
	// trusted keys outcome.keys), kept until the desired digest or the
	// keys change; failed are deploys that failed, retried at retryAt.
	refused map[string]outcome
	failed  map[string]outcome
}

// receipt is a receipt's JSON and when it was made.
type receipt struct {
	data []byte
	at   time.Time
}

// outcome is why a desired package does not run.
type outcome struct {
	digest, components string
	reason, message    string
	keys               string
	retryAt            time.Time
	wait               time.Duration
}

func (a *Agent) ns() string {
	if a.Namespace == "" {
		return cluster.DefaultNamespace
	}
	return a.Namespace
}

func (a *Agent) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Agent) log() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}

func (a *Agent) poll() time.Duration {
	if a.Poll <= 0 {
		return DefaultPoll
	}
	return a.Poll
}

// Run runs the loop until ctx ends; it returns nil then.
func (a *Agent) Run(ctx context.Context) error {
	for {
		wait := a.step(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// step does what is due and returns how long to wait for the next.
func (a *Agent) step(ctx context.Context) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	poll := a.poll()
	s, err := readState(ctx, a.Client, a.ns())
	switch {
	case errors.Is(err, ErrNotMember):
		a.st = agentState{}
		return poll
	case err != nil:
		a.log().Warn("fleet: read the member's Secret", "error", oneLine(err.Error()))
		return poll
	case s.Mode == v1alpha1.Carried:
		return poll
	}
	now := a.now()
	if s.Credential == "" {
		if s.Token == "" {
			return poll
		}
		key := s.URL + "\x00" + s.Token + "\x00" + s.Name
		if key == a.st.joinKey && now.Before(a.st.joinNext) {
			return min(poll, a.st.joinNext.Sub(now))
		}
		if err := a.join(ctx, s); err != nil {
			if ctx.Err() != nil {
				return poll // stopping: not the join's fault
			}
			a.log().Warn("fleet: join failed", "centre", s.URL, "error", oneLine(err.Error()))
			a.recordJoinError(ctx, s.Token, err)
			if key != a.st.joinKey {
				a.st.joinKey, a.st.joinWait = key, 0
			}
			a.st.joinWait = min(max(2*a.st.joinWait, poll), MaxJoinBackoff)
			a.st.joinNext = now.Add(a.st.joinWait)
			return poll
		}
		return 0
	}
	if now.Before(a.st.nextSync) && s.Credential == a.st.identity {
		return min(poll, a.st.nextSync.Sub(now))
	}
	if _, err := a.syncLocked(ctx, s); err != nil {
		a.log().Warn("fleet: sync failed", "centre", s.URL, "error", oneLine(err.Error()))
	}
	a.st.nextSync = a.now().Add(a.interval())
	return min(poll, a.interval())
}

func (a *Agent) requestTimeout() time.Duration {
	if a.RequestTimeout <= 0 {
		return DefaultRequestTimeout
	}
	return a.RequestTimeout
}

func (a *Agent) stallTimeout() time.Duration {
	if a.StallTimeout <= 0 {
		return DefaultStallTimeout
	}
	return a.StallTimeout
}

func (a *Agent) interval() time.Duration {
	if a.st.interval <= 0 {
		return wire.DefaultInterval
	}
	return a.st.interval
}

func (a *Agent) setInterval(seconds int) {
	if seconds <= 0 {
		a.st.interval = wire.DefaultInterval
		return
	}
	a.st.interval = min(max(time.Duration(seconds)*time.Second, MinInterval), MaxInterval)
}

// client is the centre's client for url, pinned to pin, with the
// credential cred; kept while they stay the same, for its connections.
func (a *Agent) client(url, pin, cred string, seen func([]byte)) *wire.Client {
	key := url + "\x00" + pin + "\x00" + cred
	if seen == nil && a.st.conn != nil && a.st.connKey == key {
		return a.st.conn
	}
	c := &wire.Client{URL: url, Pin: pin, Credential: cred, SeenCA: seen}
	if a.HTTPClient != nil {
		c.HTTP = a.HTTPClient(wire.PinnedTLS(pin, seen))
	}
	if seen == nil {
		a.st.conn, a.st.connKey = c, key
	}
	return c
}

// join makes the site key if there is none, then trades the token for a
// credential at the centre, trusting only the CA the token pins; it keeps
// the credential, the member's name, the CA it saw and the time, and
// deletes the token.
func (a *Agent) join(ctx context.Context, s *state) error {
	if err := wire.CheckURL(s.URL); err != nil {
		return err
	}
	tok, err := wire.ParseToken(s.Token)
	if err != nil {
		return err
	}
	s, err = ensureSiteKey(ctx, a.Client, a.ns())
	if err != nil {
		return err
	}
	var (
		seenMu sync.Mutex
		ca     []byte
	)
	c := a.client(s.URL, tok.CA, "", func(p []byte) { seenMu.Lock(); ca = p; seenMu.Unlock() })
	jctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
	resp, err := c.Join(jctx, wire.JoinRequest{Token: s.Token, Name: s.Name, Labels: s.Labels, PublicKey: s.PublicKey, Agent: a.Version})
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(jctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("join the fleet at %s: no whole answer within %s", s.URL, a.requestTimeout())
	}
	if err != nil {
		return centreError("join the fleet", s.URL, err)
	}
	if c.HTTP != nil {
		c.HTTP.CloseIdleConnections()
	}
	seenMu.Lock()
	caPEM := string(ca)
	seenMu.Unlock()
	switch who, _, cerr := wire.ParseCredential(resp.Credential); {
	case !wire.ValidMemberName(resp.Member):
		return fmt.Errorf("join the fleet at %s: the centre named the member %q, not a DNS label", s.URL, truncate(resp.Member))
	case s.Name != "" && resp.Member != s.Name:
		return fmt.Errorf("join the fleet at %s: the centre named the member %s, not %s as asked", s.URL, resp.Member, s.Name)
	case cerr != nil || who != resp.Member:
		return fmt.Errorf("join the fleet at %s: the centre's answer holds no credential of member %s", s.URL, resp.Member)
	case caPEM == "":
		return fmt.Errorf("join the fleet at %s: the centre's CA was not seen", s.URL)
	}
	now := a.now()
	token, url := s.Token, s.URL
	_, err = mutate(ctx, a.Client, a.ns(), false, func(s *state) error {
		if s.URL != url || s.Token != token {
			return fmt.Errorf("the Secret %s changed while the agent joined: the credential of %s is dropped", SecretName, resp.Member)
		}
		s.Credential, s.Name, s.CA, s.Token, s.Error = resp.Credential, resp.Member, caPEM, "", ""
		s.JoinedAt, s.LastSync = now, time.Time{}
		return nil
	})
	if err != nil {
		return err
	}
	a.setInterval(resp.IntervalSeconds)
	a.st.nextSync, a.st.joinKey = time.Time{}, ""
	a.log().Info("fleet: joined", "centre", url, "member", resp.Member)
	return nil
}

// centreError is err of what (join, sync) with the centre at url, which
// it names once: the client's errors of transport name it already.
func centreError(what, url string, err error) error {
	if errors.Is(err, wire.ErrRefused) {
		return fmt.Errorf("%s at %s: %w", what, url, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// recordJoinError keeps a failed join's sentence in the Secret, unless the
// Secret moved on meanwhile (another token, a credential).
func (a *Agent) recordJoinError(ctx context.Context, token string, err error) {
	msg := oneLine(err.Error())
	_, werr := mutate(ctx, a.Client, a.ns(), false, func(s *state) error {
		if s.Token != token || s.Credential != "" || s.Error == msg {
			return errUnchanged
		}
		s.Error = msg
		return nil
	})
	if werr != nil {
		a.log().Warn("fleet: record the join's failure", "error", oneLine(werr.Error()))
	}
}

// recordSync keeps a sync's outcome in the Secret: its error, or, after a
// success, no error and the time (at most once a minute).
func (a *Agent) recordSync(ctx context.Context, cred string, err error) {
	if ctx.Err() != nil {
		return // stopping: not the sync's fault
	}
	now := a.now()
	msg := ""
	if err != nil {
		msg = oneLine(err.Error())
	}
	_, werr := mutate(ctx, a.Client, a.ns(), false, func(s *state) error {
		if s.Credential != cred {
			return errUnchanged
		}
		due := err == nil && now.Sub(a.st.lastSyncWritten) >= lastSyncEvery
		if s.Error == msg && !due {
			return errUnchanged
		}
		s.Error = msg
		if err == nil {
			s.LastSync = now
		}
		return nil
	})
	switch {
	case werr != nil && !errors.Is(werr, ErrNotMember):
		a.log().Warn("fleet: record the sync", "error", oneLine(werr.Error()))
	case werr == nil && err == nil && now.Sub(a.st.lastSyncWritten) >= lastSyncEvery:
		a.st.lastSyncWritten = now
	}
}
