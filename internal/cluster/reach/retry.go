package reach

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// retryBackoff is the wait before Retry's second attempt; it doubles after
// each further one.
const retryBackoff = 500 * time.Millisecond

// DefaultAttempts is Retry's default number of attempts.
const DefaultAttempts = 6

// Retry calls fn up to attempts times (DefaultAttempts if ≤ 0) while
// it fails with a broken connection (Transient), waiting 0.5 s, 1 s, 2 s…
// in between. A push retried this way resumes: the registry has the blobs
// that went up, and they are skipped without being read.
func Retry(ctx context.Context, attempts int, fn func() error) error {
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	wait := retryBackoff
	for i := 1; ; i++ {
		err := fn()
		if err == nil || i >= attempts || !Transient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// Transient says whether err is a broken or refused connection — what a
// tunnel that dropped, or a registry Pod that restarted, looks like — and
// not an answer of the registry.
func Transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne)
}
