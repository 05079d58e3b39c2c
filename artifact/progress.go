package artifact

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"

	"github.com/ferrypkg/ferry/artifact/internal/zstdframe"
	"github.com/ferrypkg/ferry/internal/zerocopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Phase is what a progress event reports.
type Phase string

// Phases of long work reported through ProgressFunc.
const (
	PhaseResolve Phase = "resolve" // an item of the definition was resolved (Item)
	PhaseWrite   Phase = "write"   // a blob was written to an archive
	PhaseRead    Phase = "read"    // a blob was read and verified
	PhasePush    Phase = "push"    // a blob was uploaded to a registry, or found there (Skipped)
	PhasePull    Phase = "pull"    // a blob was fetched from a registry, verified and written
	PhaseCopy    Phase = "copy"    // a blob was copied to a target, or found there (Skipped)
)

// Progress is one event: a blob (Desc) went through a phase, with the
// bytes that moved for it (0 for a blob the registry had); or, without a
// blob, an item of the work (Item: an image resolved, a release installed).
// TotalBlobs and TotalBytes are the whole operation's, when known (0
// otherwise), so that a renderer can show how far it is.
//
// A blob of PartialStep bytes or more that moves (uploaded, fetched,
// written) is reported while it moves too: Partial events, each with the
// bytes of it moved so far, at least PartialStep apart, before its own
// event. A renderer that counts blobs skips them.
type Progress struct {
	Phase      Phase
	Desc       ocispec.Descriptor
	Bytes      int64
	Skipped    bool
	Item       string
	TotalBlobs int
	TotalBytes int64
	Partial    bool
}

// PartialStep is how many bytes of a moving blob apart its Partial
// progress events are (4 MiB).
const PartialStep = 4 << 20

// partial reports the bytes of one blob as they move, as Partial events
// of phase; nil (no ProgressFunc, or a blob too small) reports nothing.
// add is safe for concurrent use.
type partial struct {
	fn    ProgressFunc
	phase Phase
	desc  ocispec.Descriptor
	n     atomic.Int64
	next  atomic.Int64
}

func newPartial(fn ProgressFunc, phase Phase, desc ocispec.Descriptor) *partial {
	if fn == nil || desc.Size < PartialStep {
		return nil
	}
	p := &partial{fn: fn, phase: phase, desc: desc}
	p.next.Store(PartialStep)
	return p
}

// add counts n more bytes moved.
func (p *partial) add(n int64) {
	if p == nil || n <= 0 {
		return
	}
	total := p.n.Add(n)
	if next := p.next.Load(); total >= next && total < p.desc.Size && p.next.CompareAndSwap(next, total+PartialStep) {
		p.fn(Progress{Phase: p.phase, Desc: p.desc, Bytes: total, Partial: true})
	}
}

// partialReader counts what is read through it.
type partialReader struct {
	r io.Reader
	p *partial
}

func (r *partialReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(int64(n))
	return n, err
}

// withPartial is r counted by p; r itself when p is nil.
func withPartial(r io.Reader, p *partial) io.Reader {
	if p == nil {
		return r
	}
	return &partialReader{r: r, p: p}
}

// ProgressFunc receives progress events. Events of one operation may come
// from several goroutines at once (a push's parallel streams): a
// ProgressFunc must be safe for concurrent use and return quickly.
type ProgressFunc func(Progress)

// movingBody is an upload's body counted by p as it is sent: read, or sent
// from the file by a zerocopy.Sender (a raw blob reports each window it
// sends). body itself when p is nil, or when body is held in memory (one
// PUT sends it).
func movingBody(body io.Reader, p *partial) io.Reader {
	if _, inMemory := body.(*bytes.Reader); p == nil || inMemory {
		return body
	}
	if rb, ok := body.(*zstdframe.RawBlob); ok {
		rb.Sent = p.add // each window, as it is sent
		return &partialSender{partialReader: partialReader{r: body, p: p}, counted: true}
	}
	if _, ok := body.(zerocopy.Sender); ok {
		return &partialSender{partialReader: partialReader{r: body, p: p}}
	}
	return &partialReader{r: body, p: p}
}

// partialSender is a zerocopy.Sender counted by its partial: what it
// sends, unless the Sender counts it itself.
type partialSender struct {
	partialReader
	counted bool
}

func (s *partialSender) SendTo(c *net.TCPConn, limit int64) (int64, error) {
	n, err := s.r.(zerocopy.Sender).SendTo(c, limit)
	if !s.counted {
		s.p.add(n)
	}
	return n, err
}
