package gitserver

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"hash"
	"hash/crc32"
	"io"

	"github.com/go-git/go-git/v6/plumbing"
)

// readTypeSize reads an entry's type and inflated size.
func readTypeSize(r io.ByteReader) (plumbing.ObjectType, int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	t := plumbing.ObjectType((c >> 4) & 7)
	size := int64(c & 0x0f)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("size overflows")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(c&0x7f) << shift
	}
	return t, size, nil
}

// readOfsOffset reads an OFS delta's distance back to its base.
func readOfsOffset(r io.ByteReader) (int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	off := int64(c & 0x7f)
	for c&0x80 != 0 {
		if off >= 1<<55 {
			return 0, errors.New("offset overflows")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, err
		}
		off = (off+1)<<7 | int64(c&0x7f)
	}
	return off, nil
}

// deltaPrefix keeps the first bytes of a delta's instructions: the sizes
// of its base and result.
type deltaPrefix struct {
	b []byte
}

func (d *deltaPrefix) Write(p []byte) (int, error) {
	if k := min(len(p), 20-len(d.b)); k > 0 {
		d.b = append(d.b, p[:k]...)
	}
	return len(p), nil
}

func (d *deltaPrefix) sizes() (src, target uint64, err error) {
	src, n := binary.Uvarint(d.b)
	if n <= 0 {
		return 0, 0, errors.New("no base size")
	}
	target, m := binary.Uvarint(d.b[n:])
	if m <= 0 {
		return 0, 0, errors.New("no result size")
	}
	return src, target, nil
}

// ctxWriter stops writing once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.w.Write(p)
}

// packReader reads a pack sequentially, byte by byte for zlib (which then
// never reads past its stream), counting the offset and hashing what was
// read: the SHA-1 of the whole, the CRC-32 of the current entry.
type packReader struct {
	r       io.Reader
	buf     []byte
	rd, wr  int   // buf[rd:wr] is unread
	mark    int   // buf[mark:rd] is read but not yet hashed
	off     int64 // offset of buf[rd]
	sha     hash.Hash
	crc     uint32
	readErr error
}

func newPackReader(r io.Reader) *packReader {
	return &packReader{r: r, buf: make([]byte, 256<<10), sha: sha1.New()}
}

func (p *packReader) hashRead() {
	seg := p.buf[p.mark:p.rd]
	p.sha.Write(seg)
	p.crc = crc32.Update(p.crc, crc32.IEEETable, seg)
	p.mark = p.rd
}

func (p *packReader) fill() error {
	if p.readErr != nil {
		return p.readErr
	}
	p.hashRead()
	p.rd, p.wr, p.mark = 0, 0, 0
	n, err := p.r.Read(p.buf)
	p.wr = n
	if n == 0 {
		if err == nil {
			err = io.ErrNoProgress
		}
		p.readErr = err
		if errors.Is(err, io.EOF) {
			p.readErr = io.ErrUnexpectedEOF
		}
		return p.readErr
	}
	return nil
}

// ReadByte implements io.ByteReader (flate reads through it).
func (p *packReader) ReadByte() (byte, error) {
	if p.rd == p.wr {
		if err := p.fill(); err != nil {
			return 0, err
		}
	}
	c := p.buf[p.rd]
	p.rd++
	p.off++
	return c, nil
}

func (p *packReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if p.rd == p.wr {
		if err := p.fill(); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, io.EOF
			}
			return 0, err
		}
	}
	n := copy(b, p.buf[p.rd:p.wr])
	p.rd += n
	p.off += int64(n)
	return n, nil
}

// startEntry starts the CRC of an entry at the current offset.
func (p *packReader) startEntry() {
	p.hashRead()
	p.crc = 0
}

// entryCRC is the CRC of what was read since startEntry.
func (p *packReader) entryCRC() uint32 {
	p.hashRead()
	return p.crc
}

// sum is the SHA-1 of everything read so far.
func (p *packReader) sum() []byte {
	p.hashRead()
	return p.sha.Sum(nil)
}
