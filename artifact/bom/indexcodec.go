package bom

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/opencontainers/go-digest"
)

// The index's binary encoding (MediaTypeIndex), all integers unsigned
// varints:
//
//	magic "FERRYBOMIDX" · version byte (indexVersion)
//	strings: count, then each: length, bytes
//	components: count, then each: name, version, type, purl (string
//	  numbers), license count, license string numbers
//	SBOMs: count, then each: digest length, digest, component count,
//	  component numbers ascending as deltas (the first from -1)
//	CRC-32C of everything before it, 4 bytes little-endian
//
// An index is a cache, made again from the SBOMs: a reader meeting
// another version byte returns ErrIndexVersion and its caller rebuilds
// the index rather than converting it.
const indexMagic = "FERRYBOMIDX"

// indexVersion is the version of the encoding WriteTo writes.
const indexVersion = 1

// ErrIndex is the error ReadIndex returns (wrapped, with what is wrong) for
// data that is not an index it can read: damaged, truncated, over a limit.
var ErrIndex = errors.New("unreadable SBOM index")

// ErrIndexVersion is the error ReadIndex returns (wrapped, wrapping
// ErrIndex too) for an index of another encoding version: rebuild it.
var ErrIndexVersion = fmt.Errorf("%w: another version", ErrIndex)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// IndexLimits bound what ReadIndex takes; each count and length is checked
// before anything is allocated for it. A field ≤ 0 takes
// DefaultIndexLimits' value.
type IndexLimits struct {
	// MaxBytes bounds the encoded index: 1 GiB.
	MaxBytes int64
	// MaxStrings bounds the distinct strings: 16,000,000.
	MaxStrings int
	// MaxString bounds one string: 64 KiB (Limits' MaxString).
	MaxString int
	// MaxComponents bounds the distinct components: 4,000,000.
	MaxComponents int
	// MaxSBOMs bounds the SBOMs: 1,000,000.
	MaxSBOMs int
	// MaxSBOMComponents bounds one SBOM's components: 200,000 (Limits'
	// MaxComponents).
	MaxSBOMComponents int
	// MaxLicenses bounds one component's licenses: 256.
	MaxLicenses int
}

// DefaultIndexLimits are the limits ReadIndex applies where an IndexLimits
// field is ≤ 0.
var DefaultIndexLimits = IndexLimits{
	MaxBytes: 1 << 30, MaxStrings: 16_000_000, MaxString: DefaultLimits.MaxString, MaxComponents: 4_000_000,
	MaxSBOMs: 1_000_000, MaxSBOMComponents: DefaultLimits.MaxComponents, MaxLicenses: DefaultLimits.MaxLicenses,
}

func (lim IndexLimits) withDefaults() IndexLimits {
	d := DefaultIndexLimits
	if lim.MaxBytes > 0 {
		d.MaxBytes = lim.MaxBytes
	}
	for _, f := range [...]struct{ v, d *int }{{&lim.MaxStrings, &d.MaxStrings}, {&lim.MaxString, &d.MaxString},
		{&lim.MaxComponents, &d.MaxComponents}, {&lim.MaxSBOMs, &d.MaxSBOMs},
		{&lim.MaxSBOMComponents, &d.MaxSBOMComponents}, {&lim.MaxLicenses, &d.MaxLicenses}} {
		if *f.v > 0 {
			*f.d = *f.v
		}
	}
	return d
}

// WriteTo writes the index in its binary encoding (MediaTypeIndex) and
// returns the bytes written. The same index gives the same bytes.
func (x *Index) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	crc := crc32.New(castagnoli)
	out := io.MultiWriter(bw, crc)
	var buf []byte
	put := func(v uint64) { buf = binary.AppendUvarint(buf, v) }
	flush := func() {
		_, _ = out.Write(buf) // errors surface at bw.Flush
		buf = buf[:0]
	}
	buf = append(buf, indexMagic...)
	buf = append(buf, indexVersion)

	// Strings, numbered in the order the components use them.
	ids := map[string]uint64{}
	var strs []string
	num := func(s string) uint64 {
		id, ok := ids[s]
		if !ok {
			id = uint64(len(strs))
			ids[s] = id
			strs = append(strs, s)
		}
		return id
	}
	for _, c := range x.comps {
		num(c.Name)
		num(c.Version)
		num(c.Type)
		num(c.PURL)
		for _, l := range c.Licenses {
			num(l)
		}
	}
	put(uint64(len(strs)))
	for _, s := range strs {
		put(uint64(len(s)))
		buf = append(buf, s...)
		if len(buf) > 32<<10 {
			flush()
		}
	}
	put(uint64(len(x.comps)))
	for _, c := range x.comps {
		put(ids[c.Name])
		put(ids[c.Version])
		put(ids[c.Type])
		put(ids[c.PURL])
		put(uint64(len(c.Licenses)))
		for _, l := range c.Licenses {
			put(ids[l])
		}
		if len(buf) > 32<<10 {
			flush()
		}
	}
	put(uint64(len(x.docs)))
	for _, d := range x.docs {
		put(uint64(len(d.digest)))
		buf = append(buf, d.digest...)
		put(uint64(len(d.comps)))
		prev := int64(-1)
		for _, id := range d.comps {
			put(uint64(int64(id) - prev))
			prev = int64(id)
		}
		if len(buf) > 32<<10 {
			flush()
		}
	}
	flush()
	sum := make([]byte, 4)
	binary.LittleEndian.PutUint32(sum, crc.Sum32())
	_, _ = bw.Write(sum)
	err := bw.Flush()
	return cw.n, err
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadIndex reads an index WriteTo wrote, within lim. Data that is not one
// (damaged, truncated, over a limit) is a one-line error wrapping
// ErrIndex; another version of the encoding wraps ErrIndexVersion.
func ReadIndex(r io.Reader, lim IndexLimits) (*Index, error) {
	lim = lim.withDefaults()
	ir := &indexReader{lim: lim}
	ir.lr = &io.LimitedReader{R: r, N: lim.MaxBytes + 1}
	ir.sum = &crcReader{r: ir.lr}
	ir.br = bufio.NewReaderSize(ir.sum, 64<<10)
	x, err := ir.read()
	if err != nil {
		if ir.lr.N <= 0 {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrIndex, lim.MaxBytes)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("truncated")
		}
		if errors.Is(err, ErrIndex) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	return x, nil
}

// indexReader decodes an index.
type indexReader struct {
	lim IndexLimits
	lr  *io.LimitedReader
	sum *crcReader
	br  *bufio.Reader
}

// crcReader sums what it reads but its last 4 bytes, which it keeps: at
// the end of an index, its checksum.
type crcReader struct {
	r    io.Reader
	crc  uint32
	tail []byte
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.tail = append(c.tail, p[:n]...)
	if k := len(c.tail) - 4; k > 0 {
		c.crc = crc32.Update(c.crc, castagnoli, c.tail[:k])
		c.tail = append(c.tail[:0], c.tail[k:]...)
	}
	return n, err
}

// ReadByte reads one byte.
func (ir *indexReader) ReadByte() (byte, error) { return ir.br.ReadByte() }

// count reads a count, refusing one over max.
func (ir *indexReader) count(what string, max int) (int, error) {
	v, err := binary.ReadUvarint(ir)
	if err != nil {
		return 0, err
	}
	if v > uint64(max) {
		return 0, fmt.Errorf("more than %d %s", max, what)
	}
	return int(v), nil
}

// bytes reads n bytes into the sum.
func (ir *indexReader) bytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(ir.br, b); err != nil {
		return nil, err
	}
	return b, nil
}

// capped is an initial capacity for n items that data has yet to prove.
func capped(n int) int { return min(n, 4096) }

func (ir *indexReader) read() (*Index, error) {
	head, err := ir.bytes(len(indexMagic) + 1)
	if err != nil {
		return nil, err
	}
	if string(head[:len(indexMagic)]) != indexMagic {
		return nil, errors.New("not an SBOM index")
	}
	if v := head[len(indexMagic)]; v != indexVersion {
		return nil, fmt.Errorf("%w: version %d, this ferry reads %d", ErrIndexVersion, v, indexVersion)
	}
	n, err := ir.count("strings", ir.lim.MaxStrings)
	if err != nil {
		return nil, err
	}
	strs := make([]string, 0, capped(n))
	for range n {
		l, err := ir.count("bytes in a string", ir.lim.MaxString)
		if err != nil {
			return nil, err
		}
		b, err := ir.bytes(l)
		if err != nil {
			return nil, err
		}
		strs = append(strs, string(b))
	}
	// Each string is the index's own from here: components refer to it
	// by number, and a long one shared by many is hashed once.
	x := NewIndex()
	num := make([]uint32, len(strs))
	for i := range strs {
		num[i] = x.intern(&strs[i])
	}
	str := func() (uint32, error) {
		id, err := binary.ReadUvarint(ir)
		if err != nil {
			return 0, err
		}
		if id >= uint64(len(strs)) {
			return 0, fmt.Errorf("string %d of %d", id, len(strs))
		}
		return num[id], nil
	}
	if n, err = ir.count("components", ir.lim.MaxComponents); err != nil {
		return nil, err
	}
	var lics []uint32
	for range n {
		var ids [4]uint32
		for i := range ids {
			if ids[i], err = str(); err != nil {
				return nil, err
			}
		}
		nl, err := ir.count("licenses of a component", ir.lim.MaxLicenses)
		if err != nil {
			return nil, err
		}
		lics = lics[:0]
		for range nl {
			l, err := str()
			if err != nil {
				return nil, err
			}
			lics = append(lics, l)
		}
		if id := x.componentOf(ids, lics); int(id) != len(x.comps)-1 {
			return nil, fmt.Errorf("component %d is component %d again", len(x.comps), id)
		}
	}
	if n, err = ir.count("SBOMs", ir.lim.MaxSBOMs); err != nil {
		return nil, err
	}
	for range n {
		l, err := ir.count("bytes in a digest", 256)
		if err != nil {
			return nil, err
		}
		b, err := ir.bytes(l)
		if err != nil {
			return nil, err
		}
		d, err := digest.Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("SBOM %d: %w", len(x.docs), err)
		}
		if x.Has(d) {
			return nil, fmt.Errorf("SBOM %s twice", d)
		}
		nc, err := ir.count("components in an SBOM", ir.lim.MaxSBOMComponents)
		if err != nil {
			return nil, err
		}
		ids := make([]uint32, 0, capped(nc))
		prev := int64(-1)
		for range nc {
			delta, err := binary.ReadUvarint(ir)
			if err != nil {
				return nil, err
			}
			next := prev + int64(min(delta, 1<<40))
			if delta == 0 || next >= int64(len(x.comps)) {
				return nil, fmt.Errorf("SBOM %s: component %d of %d", d, next, len(x.comps))
			}
			ids = append(ids, uint32(next))
			prev = next
		}
		x.addDoc(d, slices.Clip(ids))
	}
	sum := make([]byte, 4)
	if _, err := io.ReadFull(ir.br, sum); err != nil {
		return nil, err
	}
	if _, err := ir.br.ReadByte(); err != io.EOF {
		return nil, errors.New("data after the index")
	}
	if binary.LittleEndian.Uint32(sum) != ir.sum.crc || !bytes.Equal(sum, ir.sum.tail) {
		return nil, errors.New("checksum mismatch: the index is damaged")
	}
	return x, nil
}
