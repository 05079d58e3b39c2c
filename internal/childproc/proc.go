package childproc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Proc is a child that answers requests, one at a time, started by Start:
// within its Limits' Memory and Disk for its whole life, and within their
// Time and Output for each Call. A child costs its start (tens of
// milliseconds for ferry's own binary) once, not once per request.
type Proc struct {
	c   *child
	ctx context.Context

	timedOut atomic.Bool // a Call passed Limits.Time

	mu  sync.Mutex
	err error // why the child is gone, once it is
}

// Start starts name with args as a Proc: tied to this process as Command
// ties it, killed when ctx is done. Its standard input and output carry
// messages (WriteMessage, ReadMessage); opts.Stdin is not used.
func Start(ctx context.Context, name string, args []string, opts RunOptions) (*Proc, error) {
	c, err := start(ctx, name, args, opts, true)
	if err != nil {
		return nil, err
	}
	return &Proc{c: c, ctx: ctx}, nil
}

// ErrExited is the error of a Call to a child that exited, without a
// reason, before it answered.
var ErrExited = errors.New("the child exited before it answered")

// Call sends msgs to the child, each as one message (written from the
// slices given, never copied), and returns its answer, one message, within
// Limits.Time and Limits.Output. Past a limit, when the
// child dies, or when ctx or Start's context is done, the child is killed
// (with whatever it started) and the error says why: a *LimitError, an
// *ExitError, a context's error; every later Call returns the same error.
// Calls are serialized.
func (p *Proc) Call(ctx context.Context, msgs ...[]byte) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	lim := p.c.lim
	stop := context.AfterFunc(ctx, p.c.kill)
	defer stop()
	if lim.Time > 0 {
		timer := time.AfterFunc(lim.Time, func() {
			p.timedOut.Store(true)
			p.c.kill()
		})
		defer timer.Stop()
	}
	var answer []byte
	var err error
	for _, m := range msgs {
		if err = WriteMessage(p.c.stdin, m); err != nil {
			break
		}
	}
	if err == nil {
		answer, err = ReadMessage(p.c.stdout, max(lim.Output, 0))
	}
	if err == nil {
		return answer, nil
	}
	if errors.Is(err, errTooLong) {
		p.c.kill()
		p.c.wait()
		p.err = &LimitError{Resource: ResourceOutput, Limits: lim}
		return nil, p.err
	}
	// The child is dead or dying: why.
	p.c.kill()
	p.c.wait()
	switch {
	case p.c.w.exceeded() != nil:
		p.err = p.c.w.exceeded()
	case p.timedOut.Load():
		p.err = &LimitError{Resource: ResourceTime, Limits: lim}
	case ctx.Err() != nil:
		p.err = ctx.Err()
	default:
		if p.err = p.c.failure(p.ctx); p.err == nil {
			p.err = ErrExited
		}
	}
	return nil, p.err
}

// PeakRSS is the child's peak resident set in bytes, once it has ended
// (after an error or Close; 0 before, or where the system does not tell).
func (p *Proc) PeakRSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.c.waited {
		return 0
	}
	return p.c.peak
}

// closeGrace is how long Close lets a child whose input it closed end on
// its own before it kills it.
const closeGrace = 5 * time.Second

// Close ends the child: its input closed, it has closeGrace to exit, then
// it is killed. It returns why the child ended if it did not exit 0 (nil
// if it had already ended after a Call's error).
func (p *Proc) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.waited {
		return nil
	}
	p.c.stdin.Close()
	t := time.AfterFunc(closeGrace, p.c.kill)
	defer t.Stop()
	p.c.wait()
	p.c.kill()
	p.err = errClosed
	return p.c.failure(context.Background())
}

// errClosed is the error of a Call after Close.
var errClosed = errors.New("the child was closed")

// errTooLong is ReadMessage's error for a message over its bound.
var errTooLong = errors.New("message too long")

// WriteMessage writes msg to w as one message: its length (8 bytes, big
// endian), then its bytes.
func WriteMessage(w io.Writer, msg []byte) error {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(msg)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(msg)
	return err
}

// ReadMessage reads one message WriteMessage wrote, refusing one longer
// than max bytes (0: any) before it allocates for it. At the end of r,
// between messages, it returns io.EOF.
func ReadMessage(r io.Reader, max int64) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint64(n[:])
	if max > 0 && size > uint64(max) || size > 1<<40 {
		return nil, fmt.Errorf("%w: %d bytes", errTooLong, size)
	}
	msg := make([]byte, size)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return msg, nil
}
