package authlimit

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestBackoff(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Options{Free: 3, Base: time.Second, Max: 8 * time.Second, Forget: time.Minute, Now: c.now})
	for i := range 3 {
		l.failKey("a")
		if d := l.backoff("a"); d != 0 {
			t.Fatalf("after %d failures: wait %s, want 0 (free attempts)", i+1, d)
		}
	}
	want := []time.Duration{1, 2, 4, 8, 8}
	for i, w := range want {
		l.failKey("a")
		if d := l.backoff("a"); d != w*time.Second {
			t.Fatalf("failure %d past the free ones: wait %s, want %s", i+1, d, w*time.Second)
		}
	}
	if d := l.backoff("b"); d != 0 {
		t.Fatalf("another client waits %s", d)
	}
	c.t = c.t.Add(9 * time.Second)
	if d := l.backoff("a"); d != 0 {
		t.Fatalf("after the wait: %s", d)
	}
	l.failKey("a") // still remembered: the back-off goes on
	if d := l.backoff("a"); d != 8*time.Second {
		t.Fatalf("remembered client: wait %s, want 8s", d)
	}
	c.t = c.t.Add(2 * time.Minute)
	if d := l.backoff("a"); d != 0 {
		t.Fatalf("forgotten client waits %s", d)
	}
	l.failKey("a")
	l.succeedKey("a")
	if _, ok := l.clients["a"]; ok {
		t.Fatal("a success did not forget the client")
	}
}

func TestBoundedClients(t *testing.T) {
	l := New(Options{Clients: 100})
	for i := range 10_000 {
		l.failKey(fmt.Sprint(i))
	}
	if n := len(l.clients); n > 100 {
		t.Fatalf("%d clients tracked, want at most 100", n)
	}
}

func TestHandler(t *testing.T) {
	h := New(Options{Free: 2, Base: time.Minute}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	do := func(pass string, remote string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		if pass != "" {
			r.SetBasicAuth("u", pass)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		return w.Code
	}
	for range 2 {
		if got := do("wrong", "10.0.0.1:1"); got != 401 {
			t.Fatalf("wrong password: %d, want 401", got)
		}
	}
	if got := do("wrong", "10.0.0.1:2"); got != 401 {
		t.Fatalf("third wrong password: %d, want 401 (it starts the back-off)", got)
	}
	for _, pass := range []string{"wrong", "right"} {
		if got := do(pass, "10.0.0.1:3"); got != http.StatusTooManyRequests {
			t.Fatalf("during the back-off, password %q: %d, want 429", pass, got)
		}
	}
	if got := do("right", "10.0.0.2:1"); got != 200 {
		t.Fatalf("another client: %d, want 200", got)
	}
	if got := do("", "10.0.0.1:4"); got != 401 {
		t.Fatalf("no credentials from a slowed client: %d, want 401 (not counted, not refused)", got)
	}
}

// TestSprayedAddresses: failures from ever new addresses (an IPv6 /64
// holds 2⁶⁴) once the table is full cost about what the first ones did:
// room is made for many at a time, not by a scan of the table for each.
func TestSprayedAddresses(t *testing.T) {
	l := New(Options{})
	for i := range DefaultClients {
		l.failKey(fmt.Sprint("warm-", i))
	}
	const n = 50_000
	start := time.Now()
	for i := range n {
		l.failKey(fmt.Sprint("spray-", i))
	}
	took := time.Since(start)
	t.Logf("%d failures of new addresses with the table full: %v (%v each)", n, took, took/n)
	if took > 2*time.Second {
		t.Errorf("%d failures took %v", n, took)
	}
	if len(l.clients) > DefaultClients {
		t.Errorf("%d clients tracked", len(l.clients))
	}
	// The newest are kept.
	if l.clients[fmt.Sprint("spray-", n-1)] == nil {
		t.Error("the last address was dropped")
	}
}

// TestClientKeyIPv6: an IPv6 client is its /64, the least a site is
// given: one host has all of it, and its addresses are one client.
func TestClientKeyIPv6(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:4000":              "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:4000": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:4000": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:4000":     "192.0.2.7",
		"not an address":              "not an address",
		"[fe80::1%eth0]:4000":         "fe80::/64",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		if got := ClientKey(r); got != want {
			t.Errorf("%s: %s, want %s", remote, got, want)
		}
	}
}

// TestConcurrentGuesses: a client sending many guesses at once has only
// Options.Concurrent of them looked at before the first is answered, and
// once it has failures, only its free attempts left; the rest are answered
// 429 without reaching the password check (they wait for a slot, and are
// refused once the first failure is in).
func TestConcurrentGuesses(t *testing.T) {
	release := make(chan struct{})
	var checked, entered atomic.Int32
	l := New(Options{Free: 5, Base: time.Minute, Concurrent: 8})
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checked.Add(1)
		<-release // a slow password check
		w.WriteHeader(http.StatusUnauthorized)
	}))
	guess := func(remote string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.SetBasicAuth("u", "guess")
		w := httptest.NewRecorder()
		entered.Add(1)
		h.ServeHTTP(w, r)
		return w.Code
	}
	const n = 200
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes <- guess(fmt.Sprintf("10.0.0.1:%d", i)) })
	}
	waitFor(t, func() bool { return checked.Load() == 8 && entered.Load() == n })
	close(release)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[401] != 8 || count[429] != n-8 || checked.Load() != 8 {
		t.Fatalf("%d guesses at once: answers %v, %d checked; want 8 checked and 401, the rest 429", n, count, checked.Load())
	}
	if l.backoff("10.0.0.1") == 0 {
		t.Fatal("8 failures and no back-off")
	}
	if l.clients["10.0.0.1"].inflight != 0 {
		t.Fatalf("%d attempts left in flight", l.clients["10.0.0.1"].inflight)
	}

	// With failures on record and no back-off yet: the free attempts left.
	l2 := New(Options{Free: 5, Base: time.Minute})
	l2.failKey("k")
	l2.failKey("k")
	var got []*Attempt
	for {
		a, no := l2.Begin("k")
		if no != nil {
			if !no.InFlight || no.Seconds() != 1 || !strings.Contains(no.String(), "in flight") {
				t.Fatalf("refusal %+v %q", no, no.String())
			}
			break
		}
		got = append(got, a)
	}
	if len(got) != 3 {
		t.Fatalf("2 of 5 failures used: %d attempts in flight, want 3", len(got))
	}
	for _, a := range got {
		a.End(http.StatusOK)
		a.End(http.StatusUnauthorized) // a second End does nothing
	}
	if len(l2.clients) != 0 {
		t.Fatalf("a success left %d records", len(l2.clients))
	}
}

// TestAttemptEndsAtStatus: an attempt is answered when its status is
// written, not when its body is: a long download does not hold a slot,
// and a handler that panics or writes nothing leaves none in flight.
func TestAttemptEndsAtStatus(t *testing.T) {
	l := New(Options{Concurrent: 1})
	streaming, done := make(chan struct{}), make(chan struct{})
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/download":
			w.WriteHeader(http.StatusOK)
			close(streaming)
			<-done
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/nothing":
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	do := func(path string) int {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "10.0.0.9:1"
		r.SetBasicAuth("u", "p")
		w := httptest.NewRecorder()
		func() {
			defer func() { recover() }()
			h.ServeHTTP(w, r)
		}()
		return w.Code
	}
	go do("/download")
	<-streaming
	if got := do("/"); got != 200 {
		t.Fatalf("during a download, another request: %d, want 200", got)
	}
	close(done)
	do("/panic")
	do("/nothing")
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.clients) == 0
	})
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for range 1000 {
		if ok() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("timed out")
}

// TestFailureOfEvictedAttempt: an attempt whose client was dropped from a
// full table while it was in flight still counts its failure: other
// clients' failures cannot wash a guess away.
func TestFailureOfEvictedAttempt(t *testing.T) {
	l := New(Options{Free: 1, Base: time.Minute, Clients: 8})
	a, no := l.Begin("guesser")
	if no != nil {
		t.Fatal(no)
	}
	for i := range 8 {
		l.failKey(fmt.Sprint("other-", i)) // the table fills; the guesser, with no failure yet, goes first
	}
	a.End(http.StatusUnauthorized)
	b, no := l.Begin("guesser")
	if no != nil {
		t.Fatal(no)
	}
	b.End(http.StatusUnauthorized)
	if l.backoff("guesser") == 0 {
		t.Fatal("2 failures with 1 free and no back-off: the first was recorded on a dropped record")
	}
}

// TestUploadAnsweredAtBodyRead: a request's credentials are checked
// before its body is read, so an upload stops counting in flight when
// its body is first read, not when its status is written at the end: a
// client's long uploads leave room for its other requests. One answered
// without its body being read (a refused guess) counts until answered.
func TestUploadAnsweredAtBodyRead(t *testing.T) {
	l := New(Options{Concurrent: 1, SlotWait: 50 * time.Millisecond})
	reading, finish := make(chan struct{}), make(chan struct{})
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			// The body's own WriteTo is kept for io.Copy.
			if _, ok := r.Body.(io.WriterTo); !ok {
				t.Error("the body lost its WriteTo")
			}
			close(reading)
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		case "/refuse":
			<-finish
			w.WriteHeader(http.StatusUnauthorized)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	do := func(path string, body io.Reader) int {
		r := httptest.NewRequest(http.MethodPost, path, body)
		r.RemoteAddr = "10.0.0.7:1"
		r.SetBasicAuth("u", "p")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	pr, pw := io.Pipe()
	done := make(chan int)
	go func() { done <- do("/upload", &writerToBody{pr}) }()
	<-reading
	if got := do("/", nil); got != http.StatusOK {
		t.Fatalf("during an upload, another request: %d, want 200", got)
	}
	pw.Close()
	if got := <-done; got != http.StatusCreated {
		t.Fatalf("upload: %d", got)
	}

	go func() { done <- do("/refuse", strings.NewReader("a body not read")) }()
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.clients["10.0.0.7"] != nil && l.clients["10.0.0.7"].inflight == 1
	})
	if got := do("/", nil); got != http.StatusTooManyRequests {
		t.Fatalf("while a guess with a body is unanswered, another: %d, want 429", got)
	}
	close(finish)
	if got := <-done; got != http.StatusUnauthorized {
		t.Fatalf("guess: %d", got)
	}
}

type writerToBody struct{ io.Reader }

func (b *writerToBody) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, b.Reader) }

// TestBurstWaitsForSlot: a client without failures that sends more
// requests at once than it may have in flight (a slow password check, a
// burst of pushes) has the excess wait for a slot, up to
// Options.SlotWait, instead of refusing requests a client may not be
// able to send again. None of the waiting is checked before a slot is
// free, and once the client has failures the excess is refused at once.
func TestBurstWaitsForSlot(t *testing.T) {
	serve := func(l *Limiter) (do func(pass string) int, entered, checking, most *atomic.Int32, release chan struct{}) {
		entered, checking, most = new(atomic.Int32), new(atomic.Int32), new(atomic.Int32)
		release = make(chan struct{})
		h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := checking.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release // a slow password check
			checking.Add(-1)
			if _, p, _ := r.BasicAuth(); p != "right" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			fmt.Fprint(w, "ok")
		}))
		do = func(pass string) int {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "10.0.0.8:1"
			r.SetBasicAuth("u", pass)
			w := httptest.NewRecorder()
			entered.Add(1)
			h.ServeHTTP(w, r)
			return w.Code
		}
		return do, entered, checking, most, release
	}

	const n = 50
	do, entered, checking, most, release := serve(New(Options{Concurrent: 2}))
	codes := make(chan int, n)
	for range n {
		go func() { codes <- do("right") }()
	}
	waitFor(t, func() bool { return entered.Load() == n && checking.Load() == 2 })
	time.Sleep(50 * time.Millisecond)
	if len(codes) != 0 {
		t.Fatalf("%d requests at once, 2 in flight: %d answered at once, want none (the rest waiting for a slot)", n, len(codes))
	}
	close(release)
	for range n {
		if got := <-codes; got != http.StatusOK {
			t.Fatalf("a request of the burst: %d, want 200", got)
		}
	}
	if most.Load() != 2 {
		t.Fatalf("%d checks at once, want 2", most.Load())
	}

	// The wait is bounded.
	do, _, checking, _, release = serve(New(Options{Concurrent: 1, SlotWait: 50 * time.Millisecond}))
	go func() { codes <- do("right") }()
	waitFor(t, func() bool { return checking.Load() == 1 })
	start := time.Now()
	if got := do("right"); got != http.StatusTooManyRequests || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("no slot within SlotWait: %d after %v, want 429 after 50ms", got, time.Since(start))
	}
	close(release)
	<-codes

	// A client with failures does not wait.
	l := New(Options{Free: 5, Concurrent: 2})
	do, _, checking, _, release = serve(l)
	for range 4 {
		l.failKey("10.0.0.8") // one free attempt left: one in flight
	}
	go func() { codes <- do("wrong") }()
	waitFor(t, func() bool { return checking.Load() == 1 })
	start = time.Now()
	if got := do("wrong"); got != http.StatusTooManyRequests || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("a second guess with failures on record: %d after %v, want 429 at once", got, time.Since(start))
	}
	close(release)
	<-codes
}

// The helpers below give the tests a failure or a success of a key
// without a request in flight; the package's users go through Begin/End.

// backoff reports how long key must wait before its next attempt is looked at
// (0: now).
func (l *Limiter) backoff(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[key]
	if c == nil {
		return 0
	}
	now := l.opts.Now()
	if l.forget(key, c, now) {
		return 0
	}
	if d := c.until.Sub(now); d > 0 {
		return d
	}
	return 0
}

// failKey records a refused attempt of key.
func (l *Limiter) failKey(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opts.Now()
	l.fail(l.record(key, now), now)
}

// succeedKey forgets key's failures.
func (l *Limiter) succeedKey(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.clients[key]; c != nil {
		c.failures, c.until = 0, time.Time{}
		l.forget(key, c, l.opts.Now())
	}
}
