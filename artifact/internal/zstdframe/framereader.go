package zstdframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/klauspost/compress/zstd"
)

// Reader reads a .tar.zst archive frame by frame. The raw frames that
// frameWriter writes are read straight from the file, with no decoder and
// no copy, and Seek passes over them without reading: a push walk that
// leaves a layer to another walk skips it for free. Any other frame goes
// through the zstd decoder, bounded to the frame. Only forward Seeks
// relative to the current position are supported, which is what
// archive/tar uses to skip an entry's data.
type Reader struct {
	f    io.ReaderAt
	Size int64 // file size
	off  int64 // file offset: in a raw frame, of the next byte; else of the next frame
	pos  int64 // position in the decompressed stream
	dec  *zstd.Decoder

	raw       bool  // in a raw frame
	rawLeft   int64 // its content bytes not yet read
	blockLeft int   // bytes left in its current block; 0 at a block boundary

	Decoding bool  // dec is decoding a frame ending at next
	Next     int64 // file offset after the frame dec decodes
	// skippable counts the skippable frames passed.
	Skippable int
	hdr       [18]byte
	win       []byte // frameEnd's window of block headers
}

func NewReader(f io.ReaderAt, size int64) (*Reader, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(MaxWindow), zstd.WithDecoderMaxMemory(MaxWindow))
	if err != nil {
		return nil, err
	}
	return &Reader{f: f, Size: size, dec: dec}, nil
}

// Close releases the decoder.
func (z *Reader) Close() { z.dec.Close() }

func (z *Reader) Read(p []byte) (int, error) {
	for {
		switch {
		case z.raw && z.rawLeft > 0:
			if z.blockLeft == 0 {
				if err := z.rawBlock(); err != nil {
					return 0, err
				}
			}
			n := min(len(p), z.blockLeft)
			k, err := z.f.ReadAt(p[:n], z.off)
			z.advance(int64(k))
			if k < n {
				return k, truncated(err)
			}
			return k, nil
		case z.raw:
			z.raw = false
		case z.Decoding:
			n, err := z.dec.Read(p)
			z.pos += int64(n)
			if err == io.EOF {
				z.Decoding, z.off = false, z.Next
				err = nil
			}
			if err != nil {
				return n, z.decodeError(err)
			}
			if z.pos > ExpansionFloor && z.pos/MaxExpansion > z.Next {
				return n, fmt.Errorf("%w: the archive expands to more than %d times its size (a zstd bomb?)", corrupt.Err, MaxExpansion)
			}
			if n > 0 {
				return n, nil
			}
		case z.off >= z.Size:
			return 0, io.EOF
		default:
			if err := z.frame(); err != nil {
				return 0, err
			}
		}
	}
}

// Rest is how many bytes of the file follow the frame being decoded, or,
// in a raw frame or between frames, the current offset.
func (z *Reader) Rest() int64 {
	if z.Decoding {
		return z.Size - z.Next
	}
	return z.Size - z.off
}

// advance moves n bytes on in the current raw block.
func (z *Reader) advance(n int64) {
	z.off += n
	z.pos += n
	z.rawLeft -= n
	z.blockLeft -= int(n)
}

// rawBlock reads the header of a raw frame's next block, which must be the
// block frameWriter writes there.
func (z *Reader) rawBlock() error {
	size, err := rawBlockAt(z.f, z.off, z.rawLeft, z.hdr[:3])
	if err != nil {
		return err
	}
	z.off += 3
	z.blockLeft = int(size)
	return nil
}

// rawBlockAt checks the header at off of a raw frame's next block, with
// rawLeft content bytes left in the frame, which must be the block
// frameWriter writes there, and returns its size. hdr is 3 bytes to read
// it into.
func rawBlockAt(f io.ReaderAt, off, rawLeft int64, hdr []byte) (int64, error) {
	if _, err := f.ReadAt(hdr[:3], off); err != nil {
		return 0, truncated(err)
	}
	size, want := rawBlockHeader(rawLeft)
	if err := checkRawHeader(hdr, want, off); err != nil {
		return 0, err
	}
	return size, nil
}

// rawBlockHeader is the size of a raw frame's next block, with rawLeft
// content bytes left in the frame, and the header frameWriter writes
// before it: the size, block type raw (0), and whether it is the last.
func rawBlockHeader(rawLeft int64) (int64, uint32) {
	size := min(rawBlockSize, rawLeft)
	h := uint32(size) << 3
	if size == rawLeft {
		h |= 1
	}
	return size, h
}

// checkRawHeader says whether the 3 bytes at hdr, read at off, are the
// block header want.
func checkRawHeader(hdr []byte, want uint32, off int64) error {
	if uint32(hdr[0])|uint32(hdr[1])<<8|uint32(hdr[2])<<16 != want {
		return fmt.Errorf("%w: zstd raw block at offset %d is damaged", corrupt.Err, off)
	}
	return nil
}

// frame starts the frame at z.off.
func (z *Reader) frame() error {
	h := z.hdr[:min(int64(len(z.hdr)), z.Size-z.off)]
	if _, err := z.f.ReadAt(h, z.off); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(h) >= 14 && bytes.Equal(h[:4], zstdMagic) && h[4] == rawFrameDescriptor && h[5] == rawWindowDescriptor {
		if size := int64(binary.LittleEndian.Uint64(h[6:14])); size > 0 {
			z.raw, z.rawLeft, z.blockLeft, z.off = true, size, 0, z.off+14
			return nil
		}
	}
	end, err := z.frameEnd(h)
	if err != nil {
		return err
	}
	if err := z.dec.Reset(io.NewSectionReader(z.f, z.off, end-z.off)); err != nil {
		return z.decodeError(err)
	}
	z.Decoding, z.Next = true, end
	return nil
}

// decodeError maps a decoder's error to corrupt.Err, naming the frame.
func (z *Reader) decodeError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return fmt.Errorf("%w: the zstd frame at offset %d needs a window over %d MiB, more than a package may use", corrupt.Err, z.off, MaxWindow>>20)
	}
	return fmt.Errorf("%w: zstd frame at offset %d: %w", corrupt.Err, z.off, err)
}

// frameEnd finds where the frame at z.off, whose first bytes are h, ends,
// from its header and its blocks' headers (RFC 8878, section 3.1).
func (z *Reader) frameEnd(h []byte) (int64, error) {
	if len(h) >= 8 && binary.LittleEndian.Uint32(h)&0xfffffff0 == 0x184d2a50 {
		// A skippable frame: magic, size, data.
		z.Skippable++
		return z.off + 8 + int64(binary.LittleEndian.Uint32(h[4:8])), nil
	}
	if len(h) < 6 || !bytes.Equal(h[:4], zstdMagic) {
		return 0, fmt.Errorf("%w: no zstd frame at offset %d", corrupt.Err, z.off)
	}
	fhd := h[4]
	single := fhd>>5&1 == 1
	n := int64(5)
	if !single {
		n++ // window descriptor
	}
	n += [4]int64{0, 1, 2, 4}[fhd&3] // dictionary ID
	switch fhd >> 6 {                // frame content size
	case 0:
		if single {
			n++
		}
	case 1:
		n += 2
	case 2:
		n += 4
	case 3:
		n += 8
	}
	at := z.off + n
	// Block headers are read through a window of the file: a run of RLE
	// blocks (4 bytes each) would cost a read per block.
	var win []byte
	var winOff int64
	for {
		if at < winOff || at+3 > winOff+int64(len(win)) {
			if z.win == nil {
				z.win = make([]byte, 64<<10)
			}
			k, err := z.f.ReadAt(z.win, at)
			if k < 3 {
				return 0, truncated(err)
			}
			win, winOff = z.win[:k], at
		}
		b := win[at-winOff:]
		bh := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
		size := int64(bh >> 3)
		switch bh >> 1 & 3 {
		case 1: // RLE: one byte stands for size bytes
			size = 1
		case 3:
			return 0, fmt.Errorf("%w: reserved zstd block type at offset %d", corrupt.Err, at)
		}
		at += 3 + size
		if bh&1 == 1 {
			break
		}
	}
	if fhd>>2&1 == 1 {
		at += 4 // content checksum
	}
	if at > z.Size {
		return 0, fmt.Errorf("%w: archive is truncated", corrupt.Err)
	}
	return at, nil
}

// Seek skips forward: offset ≥ 0 from the current position (io.SeekCurrent).
// Raw frames are passed over without reading; others are decoded.
func (z *Reader) Seek(offset int64, whence int) (int64, error) {
	if whence != io.SeekCurrent || offset < 0 {
		return z.pos, errors.New("zstd archive: only forward seeks from the current position")
	}
	for offset > 0 {
		if !z.raw || z.rawLeft == 0 {
			// Not in a raw frame's content: read through.
			var buf [32 << 10]byte
			n, err := z.Read(buf[:min(offset, int64(len(buf)))])
			offset -= int64(n)
			if err != nil {
				return z.pos, err
			}
			continue
		}
		if z.blockLeft > 0 {
			k := min(offset, int64(z.blockLeft))
			z.advance(k)
			offset -= k
			continue
		}
		// At a block boundary: pass whole blocks by arithmetic; their
		// headers are checked by the walk that reads them.
		size := min(rawBlockSize, z.rawLeft)
		if offset < size {
			if err := z.rawBlock(); err != nil {
				return z.pos, err
			}
			continue
		}
		z.off += 3 + size
		z.pos += size
		z.rawLeft -= size
		offset -= size
	}
	if z.off > z.Size {
		return z.pos, fmt.Errorf("%w: archive is truncated", corrupt.Err)
	}
	return z.pos, nil
}

// truncated maps a short read's error to corrupt.Err.
func truncated(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: archive is truncated", corrupt.Err)
	}
	return err
}
