// Package zstdframe is the .tar.zst side of the package format: the
// writer that stores already-compressed blobs as raw zstd frames, the
// reader that walks frames with bounded windows and expansion, and the
// raw blob that sends a stored blob straight from its frames.
package zstdframe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// MaxWindow bounds the window a .tar.zst frame may declare, which is the
// memory its decoder needs (8 MiB: what zstd levels 1 to 19 use; ferry
// writes 4 MiB; --ultra and --long archives are refused).
const MaxWindow = 8 << 20

// MaxExpansion bounds how many times its compressed size a .tar.zst may
// expand to, counted from the start of the archive, once it has given more
// than expansionFloor bytes (a zstd bomb: 269 KB to 8 GiB is 31,000×; a
// real package's JSON, YAML and uncompressed layers give 2–20×, and its
// gzip layers 1×).
const MaxExpansion = 100

// ExpansionFloor is how many decompressed bytes a .tar.zst may give before
// MaxExpansion applies (256 KiB): a very small archive may expand more.
const ExpansionFloor = 256 << 10

// A .tar.zst archive is a series of zstd frames. The tar stream goes through
// the encoder, except the bodies of blobs that are compressed already (gzip
// and zstd layers, Helm charts): each of those is a frame of raw blocks of its
// own. Compressing them again gains nothing, and cost a large share of
// pull's CPU (docs/performance.md). Every zstd decoder reads concatenated frames,
// so the archive is an ordinary .tar.zst.
//
// The raw frames are written here because the encoder has no setting that
// stores without trying to compress. Their layout depends only on the blob:
// blocks of rawBlockSize from its first byte, so the same package always
// gives the same bytes.

const (
	rawBlockSize = 128 << 10 // zstd's largest block
	// rawWindowDescriptor declares a 128 KiB window (exponent 17-10, mantissa 0):
	// enough for rawBlockSize blocks, and small for every decoder.
	rawWindowDescriptor = 7 << 3
	// rawFrameDescriptor: an 8-byte Frame_Content_Size, a window descriptor,
	// no checksum (every blob is checked against its digest), no dictionary.
	rawFrameDescriptor = 3 << 6
)

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// IsZstd reports whether a file starting with magic is a zstd stream: a
// frame, or a skippable frame (0x184D2A50 to 0x184D2A5F, little-endian:
// RFC 8878, section 3.1.2), which a stream may open with.
func IsZstd(magic []byte) bool {
	return bytes.Equal(magic, zstdMagic) || len(magic) == 4 && magic[0]&0xf0 == 0x50 && magic[1] == 0x2a && magic[2] == 0x4d && magic[3] == 0x18
}

// StoredMediaType reports whether a blob of media type mt is compressed
// already and goes into the archive in raw blocks.
func StoredMediaType(mt string) bool {
	for _, s := range []string{"+gzip", "+zstd", ".gzip", ".zstd"} {
		if strings.HasSuffix(mt, s) {
			return true
		}
	}
	return false
}

// Writer writes an archive's zstd frames: through enc, or, between
// beginRaw and endRaw, as one frame of raw blocks.
type Writer struct {
	out   io.Writer
	enc   *zstd.Encoder
	raw   bool
	left  int64  // bytes the raw frame still expects
	block []byte // a raw block being filled, when writes are not block-aligned
	hdr   [3]byte
}

func NewWriter(out io.Writer) (*Writer, error) {
	enc, err := NewEncoder(out)
	if err != nil {
		return nil, err
	}
	return &Writer{out: out, enc: enc}, nil
}

func (f *Writer) Write(p []byte) (int, error) {
	if !f.raw {
		return f.enc.Write(p)
	}
	if int64(len(p)) > f.left {
		return 0, fmt.Errorf("raw frame: %d bytes written past its size", int64(len(p))-f.left)
	}
	n := 0
	for len(p) > 0 {
		size := int(min(rawBlockSize, f.left+int64(len(f.block))))
		if len(f.block) == 0 && len(p) >= size {
			// Aligned: the block goes out straight from p.
			f.left -= int64(size)
			if err := f.writeBlock(p[:size]); err != nil {
				return n, err
			}
			p, n = p[size:], n+size
			continue
		}
		k := min(size-len(f.block), len(p))
		f.block = append(f.block, p[:k]...)
		p, n = p[k:], n+k
		f.left -= int64(k)
		if len(f.block) == size {
			if err := f.writeBlock(f.block); err != nil {
				return n, err
			}
			f.block = f.block[:0]
		}
	}
	return n, nil
}

// writeBlock writes one raw block: the frame's last when nothing is left
// after it.
func (f *Writer) writeBlock(b []byte) error {
	h := uint32(len(b)) << 3 // Block_Type 0 (raw)
	if f.left == 0 {
		h |= 1 // Last_Block
	}
	f.hdr[0], f.hdr[1], f.hdr[2] = byte(h), byte(h>>8), byte(h>>16)
	if _, err := f.out.Write(f.hdr[:]); err != nil {
		return err
	}
	_, err := f.out.Write(b)
	return err
}

// BeginRaw ends the current compressed frame and starts a raw frame of size
// bytes (size > 0).
func (f *Writer) BeginRaw(size int64) error {
	if err := f.enc.Close(); err != nil {
		return err
	}
	var h [4 + 2 + 8]byte
	copy(h[:], zstdMagic)
	h[4], h[5] = rawFrameDescriptor, rawWindowDescriptor
	binary.LittleEndian.PutUint64(h[6:], uint64(size))
	if _, err := f.out.Write(h[:]); err != nil {
		return err
	}
	f.raw, f.left = true, size
	if f.block == nil {
		f.block = make([]byte, 0, rawBlockSize)
	}
	return nil
}

// EndRaw checks the raw frame is complete and goes back to the encoder,
// which starts a new frame.
func (f *Writer) EndRaw() error {
	if f.left != 0 || len(f.block) != 0 {
		return fmt.Errorf("raw frame: %d bytes short", f.left)
	}
	f.raw = false
	f.enc.Reset(f.out)
	return nil
}

// Close ends the last frame.
func (f *Writer) Close() error { return f.enc.Close() }

// NewEncoder returns the encoder every ferry archive is written with; its
// settings are fixed so the same package always compresses to the same bytes.
func NewEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2), zstd.WithWindowSize(4<<20))
}
