package zstdframe

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/internal/readahead"
	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// rawWindow is how many bytes of a raw blob SendTo plans at a time (its
// list of spans stays small whatever the blob's size).
const rawWindow = 64 << 20

// RawBlob is a large blob read from a package archive that, when it lies
// whole in a raw frame (as ferry writes layers), is sent from the file:
// its bytes are the file's, between block headers. Uploaded over plain TCP
// (zerocopy.Sender) it is sent by the kernel (sendfile) block by block,
// each block hashed where it lies in the page cache right after
// (sendHashed): no copy of it through the process, and no write.
// Read, it is read ahead and hashed as any other blob (readahead). Either
// way, its end is a corruptBlobError instead of io.EOF when the bytes do
// not match the digest.
//
// Its first bytes are read through archive/tar, which leaves the zstd
// reader in the frame that holds them: only then is it known whether the
// rest is raw, and where. (An HTTP transport reads a body's first bytes
// into its buffer anyway before it hands the connection over.) What tar
// did not read it passes over at its next entry, by Seek.
type RawBlob struct {
	src  io.Reader // the tar entry
	z    *Reader
	desc ocispec.Descriptor
	h    hash.Hash
	buf  []byte // the read-ahead's chunks, or hashing's
	pos  int64  // bytes delivered
	read bool   // the first bytes were read
	// f and cur, once the first bytes are read, are the archive file and
	// where the rest lies in it, if it lies in a raw frame.
	f   *os.File
	cur *rawCursor
	ra  *readahead.Reader
	err error // sticky: the verdict at the end, or a failure
	// Sent, if set, hears of the bytes SendTo sends, each block as it
	// goes.
	Sent func(n int64)
}

func NewRawBlob(src io.Reader, z *Reader, desc ocispec.Descriptor, buf []byte) *RawBlob {
	return &RawBlob{src: src, z: z, desc: desc, h: desc.Digest.Algorithm().Hash(), buf: buf}
}

// Close stops the read-ahead, if any.
func (b *RawBlob) Close() {
	if b.ra != nil {
		b.ra.Close()
	}
}

func (b *RawBlob) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.ra != nil {
		n, err := b.ra.Read(p)
		b.pos += int64(n)
		if err == io.EOF {
			err = b.end(b.ra.Sum())
		}
		return n, b.fail(err)
	}
	if b.pos == b.desc.Size {
		return 0, b.end(b.h)
	}
	if b.read {
		var rest io.Reader = io.LimitReader(b.src, b.desc.Size-b.pos)
		if b.cur != nil {
			rest = rawReader{b.cur}
		}
		b.ra = readahead.New(rest, b.buf, b.h)
		return b.Read(p)
	}
	b.read = true
	n, err := io.ReadFull(b.src, p[:min(int64(len(p)), b.desc.Size)])
	b.h.Write(p[:n])
	b.pos += int64(n)
	if err != nil {
		return n, b.fail(truncated(err))
	}
	z := b.z
	if f, ok := z.f.(*os.File); ok && z.raw && z.rawLeft >= b.desc.Size-b.pos {
		b.f = f
		b.cur = &rawCursor{f: f, off: z.off, rawLeft: z.rawLeft, blockLeft: int64(z.blockLeft), left: b.desc.Size - b.pos}
	}
	return n, nil
}

// SendTo sends the blob from where it is to c (at most limit bytes; all if
// limit < 0): sendfile(2) per block, each block hashed right after it is
// sent (sendHashed), in windows of rawWindow.
func (b *RawBlob) SendTo(c *net.TCPConn, limit int64) (int64, error) {
	if b.err != nil {
		return 0, b.err
	}
	var first int64
	if !b.read {
		var head [4 << 10]byte
		k := int64(len(head))
		if limit >= 0 {
			k = min(k, limit)
		}
		n, err := b.Read(head[:k])
		if err != nil && err != io.EOF {
			return 0, err
		}
		if _, err := c.Write(head[:n]); err != nil {
			return int64(n), b.fail(err)
		}
		first, limit = int64(n), limit-int64(n)
	}
	if b.ra != nil || b.cur == nil || b.pos == b.desc.Size {
		n, err := zerocopy.Copy(c, b, limit)
		return first + n, err
	}
	want := b.desc.Size - b.pos
	if limit >= 0 {
		want = min(want, limit)
	}
	var sent int64
	for sent < want {
		spans, err := b.cur.spans(min(want-sent, rawWindow))
		if err != nil {
			return first + sent, b.fail(err)
		}
		n, err := sendHashed(c, b.h, b.f, spans, b.buf, b.Sent)
		sent += n
		if err != nil {
			return first + sent, b.fail(err)
		}
	}
	b.pos += sent
	if b.pos == b.desc.Size {
		if err := b.end(b.h); err != io.EOF {
			return first + sent, err
		}
	}
	return first + sent, nil
}

// end gives the verdict on the whole blob, hashed by h.
func (b *RawBlob) end(h hash.Hash) error {
	if digest.NewDigest(b.desc.Digest.Algorithm(), h) != b.desc.Digest {
		b.err = corrupt.Blob(b.desc.Digest)
	} else {
		b.err = io.EOF
	}
	return b.err
}

// fail keeps err, other than nil, as the blob's.
func (b *RawBlob) fail(err error) error {
	if err != nil && b.err == nil {
		b.err = err
	}
	return err
}

// rawReader reads a raw blob's bytes from its cursor, unhashed.
type rawReader struct{ c *rawCursor }

func (r rawReader) Read(p []byte) (int, error) {
	c := r.c
	left := c.left - c.done
	if left <= 0 {
		return 0, io.EOF
	}
	off, n, err := c.next(min(int64(len(p)), left))
	if err != nil {
		return 0, err
	}
	k, err := c.f.ReadAt(p[:n], off)
	c.advance(int64(k))
	if k < int(n) {
		return k, truncated(err)
	}
	return k, nil
}

// rawCursor walks a raw frame's blocks from a position in one.
type rawCursor struct {
	f         *os.File
	off       int64 // file offset of the next content byte (or block header)
	rawLeft   int64 // the frame's content bytes from there
	blockLeft int64 // of them, in the current block; 0 at a block header
	left      int64 // the blob's bytes
	done      int64 // of them, passed
	hdr       [3]byte
}

// span is n bytes of the file at off; when hdr is not 0, the block header
// right before them (3 bytes) must be hdr (a header is never 0: a block
// has at least one byte).
type span struct {
	off, n int64
	hdr    uint32
}

// next returns where the next at most max bytes lie, reading (and
// checking) a block header when at one.
func (c *rawCursor) next(max int64) (int64, int64, error) {
	if c.blockLeft == 0 {
		size, err := rawBlockAt(c.f, c.off, c.rawLeft, c.hdr[:])
		if err != nil {
			return 0, 0, err
		}
		c.off += 3
		c.blockLeft = size
	}
	return c.off, min(max, c.blockLeft), nil
}

func (c *rawCursor) advance(n int64) {
	c.off += n
	c.blockLeft -= n
	c.rawLeft -= n
	c.done += n
}

// spans returns where the next n bytes lie, and moves past them, without
// reading: the blocks of a raw frame are those frameWriter writes (whole
// but the last), so where they lie is arithmetic; sendHashed, which reads
// the headers with the bytes between, checks them.
func (c *rawCursor) spans(n int64) ([]span, error) {
	out := make([]span, 0, n/rawBlockSize+2)
	for n > 0 {
		var hdr uint32
		if c.blockLeft == 0 {
			if c.rawLeft <= 0 {
				return nil, fmt.Errorf("%w: a blob runs past its raw frame", corrupt.Err)
			}
			c.blockLeft, hdr = rawBlockHeader(c.rawLeft)
			c.off += 3
		}
		k := min(n, c.blockLeft)
		out = append(out, span{off: c.off, n: k, hdr: hdr})
		c.advance(k)
		n -= k
	}
	return out, nil
}

// sendHashed sends f's spans to c in order, by sendfile(2), and feeds h
// each span's bytes right after it is sent, checking the block headers
// between them; it returns how many bytes it sent, and tells sent (if
// set) of each span. The spans are
// contiguous but for those headers: their bytes are handed out by one
// zerocopy.Region — mapped 4 MiB at a time, not read into a buffer (read
// into buf where mapping is not possible) —, not read one block and one
// header at a time.
//
// Hashing a block just after it is sent, not in a goroutine that runs
// through the window ahead of the send, is what made verifying cheap in
// wall time (docs/performance.md): the registry copies the block out of the
// same pages moments later, and the two reads share the cache instead of
// each fetching it from memory. Mapping instead of reading cut client CPU
// too.
func sendHashed(c *net.TCPConn, h hash.Hash, f *os.File, spans []span, buf []byte, sentFn func(int64)) (int64, error) {
	if len(spans) == 0 {
		return 0, nil
	}
	start, end := spans[0].off, spans[len(spans)-1].off+spans[len(spans)-1].n
	if spans[0].hdr != 0 {
		start -= 3
	}
	r := zerocopy.NewRegion(f, start, end-start, buf)
	defer r.Close()
	next := func(n int64) ([]byte, error) {
		p, err := r.Next(n)
		if err == io.ErrUnexpectedEOF {
			err = truncated(nil)
		}
		return p, err
	}
	var sent int64
	err := r.Guard(func() error {
		var hdr [3]byte
		for _, s := range spans {
			n, err := zerocopy.SendFile(c, f, s.off, s.n)
			sent += n
			if sentFn != nil {
				sentFn(n)
			}
			if err != nil {
				return err
			}
			if s.hdr != 0 {
				for got := 0; got < len(hdr); {
					p, err := next(int64(len(hdr) - got))
					if err != nil {
						return err
					}
					got += copy(hdr[got:], p)
				}
				if err := checkRawHeader(hdr[:], s.hdr, s.off-3); err != nil {
					return err
				}
			}
			for left := s.n; left > 0; {
				p, err := next(left)
				if err != nil {
					return err
				}
				h.Write(p)
				left -= int64(len(p))
			}
		}
		return nil
	})
	if errors.Is(err, zerocopy.ErrFileChanged) {
		err = corrupt.In("", err)
	}
	return sent, err
}
