package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Defaults of RemoteOptions' stall detection.
const (
	// DefaultStallWindow is how long a reader may wait on a registry's
	// response (its headers, or the next bytes of its body) before the
	// rate it got is judged (1 min).
	DefaultStallWindow = time.Minute
	// DefaultMinRate is the slowest a registry may send while ferry waits
	// on it (16 KiB/s: a 1 GiB layer at that rate takes 18 hours). Slower,
	// and the transfer is given up as stalled.
	DefaultMinRate = 16 << 10
)

// ErrStalled is wrapped by the error of a transfer given up because the
// registry sent too little for too long.
var ErrStalled = errors.New("stalled")

// StallTransport gives up a GET or HEAD whose response body arrives slower
// than minRate while it is being waited on (time the reader spends
// elsewhere — writing what it read, waiting on another blob — does not
// count), or whose headers do not arrive within window. Without it a registry that
// sends a blob at 1 KiB/s holds a pull forever.
type StallTransport struct {
	Next    http.RoundTripper
	Window  time.Duration
	MinRate int64
	posts   bool // a POST's answer judged too
}

// NewStallTransport is next, giving up a request whose answer does not
// start within window, or whose body comes slower than minRate bytes a
// second while it is waited on, with an error wrapping ErrStalled — as
// RemoteOptions does for a registry, but for a POST's answer too (a git
// server answers a POST with the pack). A window or minRate ≤ 0 is
// DefaultStallWindow or DefaultMinRate.
func NewStallTransport(next http.RoundTripper, window time.Duration, minRate int64) http.RoundTripper {
	if window <= 0 {
		window = DefaultStallWindow
	}
	if minRate <= 0 {
		minRate = DefaultMinRate
	}
	return &StallTransport{Next: next, Window: window, MinRate: minRate, posts: true}
}

func (t *StallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead && !(t.posts && req.Method == http.MethodPost) {
		// An upload's pace is ferry's own; a registry may take long to
		// commit a large one (S3 assembles its parts).
		return t.Next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	headers := time.AfterFunc(t.Window, func() {
		cancel(fmt.Errorf("%w: %s sent no answer in %s", ErrStalled, req.URL.Host, t.Window))
	})
	resp, err := t.Next.RoundTrip(req.WithContext(ctx))
	headers.Stop()
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrStalled) {
			err = cause
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = &stallBody{rc: resp.Body, ctx: ctx, cancel: cancel, t: t, host: req.URL.Host}
	return resp, nil
}

// stallBody measures the rate of a response body over the time its reader
// waits in Read.
type stallBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	t      *StallTransport
	host   string

	mu     sync.Mutex
	waited time.Duration // in Read, since the last judgement
	got    int64         // bytes, since the last judgement
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	left := b.t.Window - b.waited
	b.mu.Unlock()
	// A Read that waits out the rest of the window with nothing to show
	// is given up from outside: it may never return by itself.
	timer := time.AfterFunc(max(left, 0), func() {
		b.mu.Lock()
		got := b.got
		b.mu.Unlock()
		if got < b.t.MinRate*int64(b.t.Window/time.Second) {
			b.cancel(b.stalled(got))
		}
	})
	start := time.Now()
	n, err := b.rc.Read(p)
	timer.Stop()
	b.mu.Lock()
	b.waited += time.Since(start)
	b.got += int64(n)
	var stalled error
	if b.waited >= b.t.Window {
		if b.got < b.t.MinRate*int64(b.waited/time.Second) {
			stalled = b.stalled(b.got)
		}
		b.waited, b.got = 0, 0
	}
	b.mu.Unlock()
	if stalled != nil {
		b.cancel(stalled)
		return n, stalled
	}
	if err != nil && err != io.EOF {
		if cause := context.Cause(b.ctx); errors.Is(cause, ErrStalled) {
			return n, cause
		}
	}
	return n, err
}

func (b *stallBody) stalled(got int64) error {
	return fmt.Errorf("%w: %s sent %d bytes in %s, slower than %d KiB/s", ErrStalled, b.host, got, b.t.Window, b.t.MinRate>>10)
}

func (b *stallBody) Close() error {
	err := b.rc.Close()
	b.cancel(nil)
	return err
}
