// Package authlimit slows down password guessing against ferry's HTTP
// servers (the registry's htpasswd, the git server): a client whose
// credentials are refused again and again waits longer and longer before
// its next attempt is even looked at, and is answered 429 Too Many Requests
// with a Retry-After until then. It is one middleware that every server with
// a password check goes through; it knows nothing of how credentials are
// checked, only of the answers: a request that carried an Authorization
// header and was answered 401 is a failure, one answered below 400 a
// success. Attempts are counted while in flight, too: a client cannot
// send many guesses at once before the first of them is answered.
package authlimit

import (
	"container/list"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	// DefaultFree is how many refused attempts a client has before it is
	// slowed down (5: a user who mistypes a password a few times never
	// waits).
	DefaultFree = 5
	// DefaultBase is the first wait once a client is past its free
	// attempts (1 s); each further failure doubles it.
	DefaultBase = time.Second
	// DefaultMax bounds the wait (5 min): at most a dozen guesses an hour
	// once the back-off is at its maximum.
	DefaultMax = 5 * time.Minute
	// DefaultForget is how long a client's failures are remembered after its
	// last one (15 min).
	DefaultForget = 15 * time.Minute
	// DefaultClients bounds how many clients are tracked at once (10,000):
	// memory stays bounded whatever the number of addresses an attacker
	// uses. Past it the oldest eighth of them is dropped.
	DefaultClients = 10_000
	// DefaultConcurrent bounds a client's attempts in flight (not yet
	// answered) while it has no failure on record (64: many more than any
	// registry client's parallel requests). A client with failures has
	// its free attempts left in flight at most, one once they are used.
	DefaultConcurrent = 64
	// DefaultSlotWait is how long a request of a client without failures
	// that finds as many of its attempts in flight as it may have waits
	// for one of them to be answered before it is refused (10 s).
	DefaultSlotWait = 10 * time.Second
)

// Options configures a Limiter; the zero value uses the defaults above.
type Options struct {
	Free    int
	Base    time.Duration
	Max     time.Duration
	Forget  time.Duration
	Clients int
	// Concurrent bounds a client's attempts in flight (DefaultConcurrent).
	Concurrent int
	// SlotWait bounds a request's wait for a slot in flight (DefaultSlotWait).
	SlotWait time.Duration
	// Now is the clock (time.Now if nil), for tests.
	Now func() time.Time
}

// Limiter tracks refused authentications by client address.
type Limiter struct {
	opts    Options
	mu      sync.Mutex
	clients map[string]*client
}

type client struct {
	failures int
	last     time.Time  // last failure
	until    time.Time  // no attempt is looked at before
	inflight int        // attempts begun, not yet answered
	waiters  *list.List // of chan struct{}: requests waiting for a slot, first first
}

// New returns a Limiter with opts, defaults filled in.
func New(opts Options) *Limiter {
	if opts.Free <= 0 {
		opts.Free = DefaultFree
	}
	if opts.Base <= 0 {
		opts.Base = DefaultBase
	}
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	if opts.Forget <= 0 {
		opts.Forget = DefaultForget
	}
	if opts.Clients <= 0 {
		opts.Clients = DefaultClients
	}
	if opts.Concurrent <= 0 {
		opts.Concurrent = DefaultConcurrent
	}
	if opts.SlotWait <= 0 {
		opts.SlotWait = DefaultSlotWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Limiter{opts: opts, clients: map[string]*client{}}
}

// forget drops c's failures once they are older than Forget, and c itself
// when nothing is left of it. Called with mu held.
func (l *Limiter) forget(key string, c *client, now time.Time) bool {
	if c.failures > 0 && now.Sub(c.last) > l.opts.Forget {
		c.failures, c.until = 0, time.Time{}
	}
	if c.failures == 0 && c.inflight == 0 && (c.waiters == nil || c.waiters.Len() == 0) {
		if l.clients[key] == c {
			delete(l.clients, key)
		}
		return true
	}
	return false
}

// Attempt is one authentication attempt Begin admitted; End records its
// answer.
type Attempt struct {
	l        *Limiter
	key      string
	c        *client // the record that counts it in flight
	answered bool    // no longer counted in flight
	ended    bool
}

// Refusal says why an attempt was not looked at and when to retry.
type Refusal struct {
	// Wait is how long until the next attempt is looked at.
	Wait time.Duration
	// InFlight: the client has as many attempts in flight as it may;
	// else it is backed off after failures.
	InFlight bool
}

// Seconds is Wait in whole seconds, rounded up (a Retry-After).
func (r *Refusal) Seconds() int { return int((r.Wait + time.Second - 1) / time.Second) }

// String says it in one line.
func (r *Refusal) String() string {
	if r.InFlight {
		return "too many authentications in flight; retry in " + strconv.Itoa(r.Seconds()) + " s"
	}
	return "too many failed authentications; retry in " + strconv.Itoa(r.Seconds()) + " s"
}

// Begin admits an attempt of key, or says why not: the client is backed
// off, or it has as many attempts in flight as it may (Options.Concurrent
// without failures, its free attempts left with some, one once they are
// used).
func (l *Limiter) Begin(key string) (*Attempt, *Refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, no, _ := l.begin(key)
	return a, no
}

// begin is Begin with mu held; it also returns key's record.
func (l *Limiter) begin(key string) (*Attempt, *Refusal, *client) {
	now := l.opts.Now()
	c := l.record(key, now)
	if d := c.until.Sub(now); d > 0 {
		return nil, &Refusal{Wait: d}, c
	}
	limit := l.opts.Concurrent
	if c.failures > 0 {
		limit = max(1, l.opts.Free-c.failures)
	}
	if c.inflight >= limit {
		return nil, &Refusal{Wait: time.Second, InFlight: true}, c
	}
	c.inflight++
	return &Attempt{l: l, key: key, c: c}, nil, c
}

// beginWait is Begin for a request: one of a client without failures
// that finds as many of its attempts in flight as it may have waits for
// one to be answered, up to SlotWait and while ctx lasts. A burst of
// requests with the right credentials (pushes at once, a slow password
// check) is then served, not refused; none of the waiting is looked at
// before a slot is free, and once the client has a failure they are
// refused at once.
func (l *Limiter) beginWait(ctx context.Context, key string) (*Attempt, *Refusal) {
	var timeout <-chan time.Time
	for {
		l.mu.Lock()
		a, no, c := l.begin(key)
		if no == nil || !no.InFlight || c.failures > 0 {
			l.mu.Unlock()
			return a, no
		}
		if c.waiters == nil {
			c.waiters = list.New()
		}
		woken := make(chan struct{})
		e := c.waiters.PushBack(woken)
		l.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(l.opts.SlotWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-woken:
			continue
		case <-timeout:
		case <-ctx.Done():
		}
		l.mu.Lock()
		select {
		case <-woken: // a slot came meanwhile: the next one's
			wake(c, false)
		default:
			c.waiters.Remove(e)
		}
		l.mu.Unlock()
		return nil, no
	}
}

// wake lets the first request waiting for one of c's slots try again,
// or all of them (a failure: they are refused, or c dropped from the
// table: they try again on a new record). Called with mu held.
func wake(c *client, all bool) {
	for c.waiters != nil && c.waiters.Len() > 0 {
		close(c.waiters.Remove(c.waiters.Front()).(chan struct{}))
		if !all {
			return
		}
	}
}

// End records a's answer: 401 a failure, below 400 a success, anything
// else (0: not known) neither. A second End does nothing.
func (a *Attempt) End(status int) {
	if a == nil {
		return
	}
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.ended {
		return
	}
	a.ended = true
	a.answer()
	now := l.opts.Now()
	// The answer goes to key's record now: the one that counted a may
	// have been dropped from a full table meanwhile.
	switch {
	case status == http.StatusUnauthorized:
		l.fail(l.record(a.key, now), now)
	case status != 0 && status < 400:
		if c := l.clients[a.key]; c != nil {
			c.failures, c.until = 0, time.Time{}
		}
	}
	if c := l.clients[a.key]; c != nil {
		l.forget(a.key, c, now)
	}
}

// answer stops counting a in flight: its credentials have been looked
// at. Called with mu held.
func (a *Attempt) answer() {
	if !a.answered {
		a.answered = true
		a.c.inflight--
		wake(a.c, false)
	}
}

// record returns key's record, made (room made for it in a full table)
// if it has none or it was forgotten. Called with mu held.
func (l *Limiter) record(key string, now time.Time) *client {
	c := l.clients[key]
	if c != nil && !l.forget(key, c, now) {
		return c
	}
	if len(l.clients) >= l.opts.Clients {
		l.evict(now)
	}
	c = &client{}
	l.clients[key] = c
	return c
}

// fail counts a failure of c. Called with mu held.
func (l *Limiter) fail(c *client, now time.Time) {
	c.failures++
	c.last = now
	wake(c, true) // those waiting for a slot are refused now
	if over := c.failures - l.opts.Free; over > 0 {
		d := l.opts.Base
		for i := 1; i < over && d < l.opts.Max; i++ {
			d *= 2
		}
		c.until = now.Add(min(d, l.opts.Max))
	}
}

// evict drops forgotten clients, and if that leaves the table full, the
// eighth of it whose last failures are oldest: room for many new clients
// at once, so that failures from ever new addresses cost one pass over the
// table per eighth of it, not one per failure. Called with mu held.
func (l *Limiter) evict(now time.Time) {
	type entry struct {
		key  string
		last time.Time
	}
	kept := make([]entry, 0, len(l.clients))
	for k, c := range l.clients {
		if l.forget(k, c, now) {
			continue
		}
		kept = append(kept, entry{k, c.last})
	}
	if len(l.clients) < l.opts.Clients {
		return
	}
	slices.SortFunc(kept, func(a, b entry) int { return a.last.Compare(b.last) })
	for _, e := range kept[:max(1, l.opts.Clients/8)] {
		wake(l.clients[e.key], true)
		delete(l.clients, e.key)
	}
}

// Handler returns next behind the limiter: a request with credentials from
// a client that must wait gets 429 with Retry-After (next is not called); a
// request with credentials answered 401 counts as a failure of its client,
// one answered with a status below 400 as a success, as soon as its status
// is written. It stops counting in flight as soon as next begins to read
// its body, or writes its status: an upload's or a download's bytes are
// not waited for. A request of a client without failures that finds as
// many of its attempts in flight as it may have waits for a slot, up to
// Options.SlotWait, before it is refused. Requests without an
// Authorization header are passed through and never counted. The client
// is the request's remote IP address (ClientKey).
//
// next must check a request's credentials before it reads its body, and
// those of every request it answers below 400: a path that answers
// without looking at them (a health probe) belongs in front of the
// limiter, or its answer clears a guesser's failures.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		a, no := l.beginWait(r.Context(), ClientKey(r))
		if no != nil {
			w.Header().Set("Retry-After", strconv.Itoa(no.Seconds()))
			http.Error(w, no.String(), http.StatusTooManyRequests)
			return
		}
		sw := &statusWriter{ResponseWriter: w, attempt: a}
		defer a.End(0) // a handler that wrote nothing, or panicked
		if body := r.Body; body != nil && body != http.NoBody {
			r.Body = &attemptBody{ReadCloser: body, attempt: a}
			// net/http drains a body left unread before it answers only
			// if it is the one it gave.
			defer func() { r.Body = body }()
		}
		next.ServeHTTP(sw, r)
	})
}

// attemptBody stops counting its attempt in flight when it is first read.
type attemptBody struct {
	io.ReadCloser
	attempt *Attempt
	read    atomic.Bool
}

func (b *attemptBody) answer() {
	if !b.read.Swap(true) {
		l := b.attempt.l
		l.mu.Lock()
		b.attempt.answer()
		l.mu.Unlock()
	}
}

func (b *attemptBody) Read(p []byte) (int, error) {
	b.answer()
	return b.ReadCloser.Read(p)
}

// WriteTo keeps the body's own WriteTo in reach of io.Copy.
func (b *attemptBody) WriteTo(w io.Writer) (int64, error) {
	b.answer()
	if wt, ok := b.ReadCloser.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{b.ReadCloser})
}

// ClientKey is the client a request comes from: its remote IPv4
// address, or its IPv6 address's /64 — the least a site is given, so one
// host holds 2⁶⁴ addresses, and would otherwise be as many clients, each
// with its free attempts.
func ClientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is4() {
		return addr.String()
	}
	p, err := addr.Prefix(64)
	if err != nil {
		return host
	}
	return p.String()
}

// statusWriter ends its attempt with the first status written.
type statusWriter struct {
	http.ResponseWriter
	attempt *Attempt
	status  int
}

func (w *statusWriter) setStatus(code int) {
	if w.status == 0 {
		w.status = code
		w.attempt.End(code)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.setStatus(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.setStatus(http.StatusOK)
	return w.ResponseWriter.Write(p)
}

// ReadFrom keeps the connection's own ReadFrom (sendfile for a file) in
// reach of io.Copy.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	w.setStatus(http.StatusOK)
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{w.ResponseWriter}, src)
}

// Flush passes a flush on (streamed packs, blob downloads).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
