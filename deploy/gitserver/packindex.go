package gitserver

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"container/list"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/format/packfile"
)

// A bundle's pack is written to disk as it is and indexed here: one
// sequential pass reads every entry's header and hashes the objects stored
// whole as they stream by, then each delta is resolved against its base
// (bases kept in a cache of bounded size, re-read from the pack when they
// fell out of it). The pack, its .idx and a table of every object's type
// and size (objectTable) are what the server then reads.
//
// go-git's own indexer keeps the content of every resolved delta in memory
// until the whole pack is done, and reads a delta's base and result whole
// whatever their size: a few kilobytes of deltas can ask for gigabytes.
// Here what is held in memory is bounded by maxResolved and
// resolveCacheBytes, plus about 100 bytes per object.

// Limits of what a pack may hold; a pack beyond them is refused (ErrBundle).
const (
	// maxResolved bounds every object the server holds whole in memory: a
	// commit, tree or tag, a delta, its base and its result. Blobs stored
	// whole (as git stores files over core.bigFileThreshold, 512 MiB by
	// default) may be of any size: they are only ever streamed.
	maxResolved = 32 << 20
	// maxPackObjects bounds the objects of one pack.
	maxPackObjects = 1 << 20
	// maxDeltaChain bounds a chain of deltas (git's pack-objects makes
	// them at most 4095 long).
	maxDeltaChain = 4095
	// resolveCacheBytes bounds the resolved bases kept for their other
	// deltas.
	resolveCacheBytes = 32 << 20
)

// errPack: the pack is malformed or over a limit.
var errPack = errors.New("pack")

// packEntry is one object of the pack, in pack order.
type packEntry struct {
	offset  int64    // of the entry's header
	size    int64    // inflated bytes stored: the object's, or its delta's
	objSize int64    // the object's size (a delta's result)
	base    int32    // a delta's base entry; -1 until a REF delta's base is found
	crc     uint32   // of the entry's bytes, for the .idx
	hdr     uint8    // header length: the zlib stream starts at offset+hdr
	kind    int8     // as stored: commit, tree, blob, tag, OFS or REF delta
	typ     int8     // the object's type (a delta's: once resolved)
	known   bool     // hash is set
	hash    [20]byte // the object's id
}

func (e *packEntry) delta() bool {
	k := plumbing.ObjectType(e.kind)
	return k == plumbing.OFSDeltaObject || k == plumbing.REFDeltaObject
}

// refDelta is a REF delta waiting for its base.
type refDelta struct {
	base [20]byte
	idx  int32
}

// packIndexer indexes one pack file.
type packIndexer struct {
	f        *os.File
	entries  []packEntry
	refs     []refDelta // sorted by base once scanned
	checksum [20]byte   // the pack's trailer
	end      int64      // offset of the trailer
	zr       io.ReadCloser
	cache    *resolveCache
}

// indexPack indexes the pack f (at its start) into dir: f is renamed to
// dir/objects/pack/pack-<checksum>.pack beside its .idx, and dir gets the
// object table. It returns the pack's checksum.
func indexPack(ctx context.Context, f *os.File, dir string) (string, error) {
	x := &packIndexer{f: f, cache: newResolveCache(resolveCacheBytes)}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := x.scan(ctx); err != nil {
		return "", err
	}
	if err := x.resolve(ctx); err != nil {
		return "", err
	}
	order, err := x.sorted()
	if err != nil {
		return "", err
	}
	sum := hex.EncodeToString(x.checksum[:])
	packDir := filepath.Join(dir, "objects", "pack")
	if err := x.writeIdx(filepath.Join(packDir, "pack-"+sum+".idx"), order); err != nil {
		return "", err
	}
	if err := x.writeTable(filepath.Join(dir, objectTableName), order); err != nil {
		return "", err
	}
	if err := os.Rename(f.Name(), filepath.Join(packDir, "pack-"+sum+".pack")); err != nil {
		return "", err
	}
	return sum, nil
}

func packErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errPack, fmt.Sprintf(format, a...))
}

// mib formats a size for a message: in MiB (rounded up), or in bytes
// under one.
func mib(n int64) string {
	if n < 1<<20 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	return strconv.FormatInt((n+(1<<20)-1)>>20, 10) + " MiB"
}

// scan reads the pack once: every entry's header, its CRC, the hash of
// every object stored whole, the sizes a delta declares; and the trailer.
func (x *packIndexer) scan(ctx context.Context) error {
	pr := newPackReader(x.f)
	var hdr [12]byte
	if _, err := io.ReadFull(pr, hdr[:]); err != nil {
		return packErr("header: %v", err)
	}
	if string(hdr[:4]) != "PACK" {
		return packErr("no PACK signature")
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return packErr("version %d, want 2 or 3", v)
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	if count > maxPackObjects {
		return packErr("%d objects: more than the %d the git server indexes", count, maxPackObjects)
	}
	x.entries = make([]packEntry, 0, count) // ≤ maxPackObjects × 56 bytes
	for i := range count {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		pr.startEntry()
		e := packEntry{offset: pr.off, base: -1}
		kind, size, err := readTypeSize(pr)
		if err != nil {
			return packErr("object %d at offset %d: %v", i, e.offset, err)
		}
		e.kind, e.size = int8(kind), size
		switch kind {
		case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
			e.typ, e.objSize = int8(kind), size
			if kind != plumbing.BlobObject && size > maxResolved {
				return packErr("%s at offset %d is %s: larger than the %s the git server reads whole", kind, e.offset, mib(size), mib(maxResolved))
			}
		case plumbing.OFSDeltaObject:
			rel, err := readOfsOffset(pr)
			if err != nil {
				return packErr("delta at offset %d: %v", e.offset, err)
			}
			if rel <= 0 || rel > e.offset-12 {
				return packErr("delta at offset %d: base offset out of the pack", e.offset)
			}
			base := e.offset - rel
			j, found := slices.BinarySearchFunc(x.entries, base, func(p packEntry, off int64) int {
				switch {
				case p.offset < off:
					return -1
				case p.offset > off:
					return 1
				}
				return 0
			})
			if !found {
				return packErr("delta at offset %d: no object at its base offset %d", e.offset, base)
			}
			e.base = int32(j)
		case plumbing.REFDeltaObject:
			var h [20]byte
			if _, err := io.ReadFull(pr, h[:]); err != nil {
				return packErr("delta at offset %d: %v", e.offset, err)
			}
			x.refs = append(x.refs, refDelta{base: h, idx: int32(len(x.entries))})
		default:
			return packErr("object %d at offset %d: type %d", i, e.offset, kind)
		}
		if e.delta() && size > maxResolved {
			return packErr("delta at offset %d is %s: larger than the %s the git server reads whole", e.offset, mib(size), mib(maxResolved))
		}
		e.hdr = uint8(pr.off - e.offset)
		if err := x.inflateEntry(ctx, pr, &e); err != nil {
			return err
		}
		e.crc = pr.entryCRC()
		x.entries = append(x.entries, e)
	}
	x.end = pr.off
	sum := pr.sum()
	var trailer [20]byte
	if _, err := io.ReadFull(pr, trailer[:]); err != nil {
		return packErr("trailer: %v", err)
	}
	if !bytes.Equal(sum, trailer[:]) {
		return packErr("checksum %x does not match its content (%x)", trailer, sum)
	}
	x.checksum = trailer
	if n, _ := pr.Read(hdr[:1]); n != 0 {
		return packErr("data after the pack's trailer")
	}
	slices.SortFunc(x.refs, func(a, b refDelta) int { return bytes.Compare(a.base[:], b.base[:]) })
	return nil
}

// inflateEntry reads e's zlib stream from pr: an object stored whole is
// hashed; of a delta, the sizes its instructions declare are checked.
func (x *packIndexer) inflateEntry(ctx context.Context, pr *packReader, e *packEntry) error {
	if err := x.resetZlib(pr); err != nil {
		return packErr("%s at offset %d: %v", plumbing.ObjectType(e.kind), e.offset, err)
	}
	var w io.Writer
	var h hash.Hash
	var prefix deltaPrefix
	if e.delta() {
		w = &prefix
	} else {
		h = objectHasher(plumbing.ObjectType(e.kind), e.size)
		w = h
	}
	n, err := io.Copy(ctxWriter{ctx, w}, io.LimitReader(x.zr, e.size))
	if err == nil && n < e.size {
		err = fmt.Errorf("inflates to %d bytes, not the %d its header says", n, e.size)
	}
	if err == nil {
		err = expectEOF(x.zr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return packErr("%s at offset %d: %v", plumbing.ObjectType(e.kind), e.offset, err)
	}
	if h != nil {
		copy(e.hash[:], h.Sum(nil))
		e.known = true
		return nil
	}
	src, target, err := prefix.sizes()
	if err != nil {
		return packErr("delta at offset %d: %v", e.offset, err)
	}
	if src > maxResolved || target > maxResolved {
		return packErr("delta at offset %d makes an object of %s from one of %s: larger than the %s the git server resolves in memory", e.offset, mib(int64(target)), mib(int64(src)), mib(maxResolved))
	}
	e.objSize = int64(target)
	return nil
}

func (x *packIndexer) resetZlib(r io.Reader) error {
	if x.zr == nil {
		zr, err := zlib.NewReader(r)
		if err != nil {
			return err
		}
		x.zr = zr
		return nil
	}
	return x.zr.(zlib.Resetter).Reset(r, nil)
}

// expectEOF checks that r (a zlib stream) ends here, its checksum included.
func expectEOF(r io.Reader) error {
	var b [1]byte
	n, err := r.Read(b[:])
	switch {
	case n > 0:
		return errors.New("inflates to more than its header says")
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return expectEOF(r)
	}
	return err
}

// resolve resolves every delta, from the objects stored whole down each
// chain, and hashes it.
func (x *packIndexer) resolve(ctx context.Context) error {
	n := len(x.entries)
	// OFS children of each entry, as ranges of one array (counting sort).
	start := make([]int32, n+1)
	for i := range x.entries {
		if e := &x.entries[i]; plumbing.ObjectType(e.kind) == plumbing.OFSDeltaObject {
			start[e.base+1]++
		}
	}
	for i := range n {
		start[i+1] += start[i]
	}
	children := make([]int32, start[n])
	next := slices.Clone(start[:n])
	for i := range x.entries {
		if e := &x.entries[i]; plumbing.ObjectType(e.kind) == plumbing.OFSDeltaObject {
			children[next[e.base]] = int32(i)
			next[e.base]++
		}
	}
	next = nil

	// refsOf is the REF deltas on the object h.
	refsOf := func(h [20]byte) []refDelta {
		k, _ := slices.BinarySearchFunc(x.refs, h, func(r refDelta, h [20]byte) int { return bytes.Compare(r.base[:], h[:]) })
		end := k
		for end < len(x.refs) && x.refs[end].base == h {
			end++
		}
		return x.refs[k:end]
	}
	var visit func(i int32, depth int) error
	resolveChild := func(parent, c int32, depth int) error {
		ce := &x.entries[c]
		if ce.known {
			return nil
		}
		if depth > maxDeltaChain {
			return packErr("delta at offset %d: a chain of more than %d deltas", ce.offset, maxDeltaChain)
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		ce.base = parent
		ce.typ = x.entries[parent].typ
		base, err := x.content(parent)
		if err != nil {
			return err
		}
		delta, err := x.inflateAt(ce)
		if err != nil {
			return err
		}
		h := objectHasher(plumbing.ObjectType(ce.typ), ce.objSize)
		if start[c] == start[c+1] {
			// No OFS delta on it (REF deltas on it, found by its hash,
			// are rare): hashed as it streams, not kept.
			if err := streamDelta(h, base, delta, ce.objSize); err != nil {
				return packErr("delta at offset %d: %v", ce.offset, err)
			}
			copy(ce.hash[:], h.Sum(nil))
			ce.known = true
			if len(refsOf(ce.hash)) == 0 {
				return nil
			}
			return visit(c, depth)
		}
		data, err := packfile.PatchDelta(base, delta)
		if err != nil {
			return packErr("delta at offset %d: %v", ce.offset, err)
		}
		if int64(len(data)) != ce.objSize {
			return packErr("delta at offset %d: makes %d bytes, not the %d it declares", ce.offset, len(data), ce.objSize)
		}
		h.Write(data)
		copy(ce.hash[:], h.Sum(nil))
		ce.known = true
		x.cache.put(c, data)
		return visit(c, depth)
	}
	visit = func(i int32, depth int) error {
		for _, c := range children[start[i]:start[i+1]] {
			if err := resolveChild(i, c, depth+1); err != nil {
				return err
			}
		}
		for _, r := range refsOf(x.entries[i].hash) {
			if err := resolveChild(i, r.idx, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range x.entries {
		if !x.entries[i].delta() {
			if err := visit(int32(i), 0); err != nil {
				return err
			}
		}
	}
	for i := range x.entries {
		if e := &x.entries[i]; !e.known {
			return packErr("delta at offset %d: its base is not in the pack", e.offset)
		}
	}
	x.cache = nil
	return nil
}

// content returns entry i's object, whole: from the cache, or read from
// the pack (and its base's, recursively).
func (x *packIndexer) content(i int32) ([]byte, error) {
	if b, ok := x.cache.get(i); ok {
		return b, nil
	}
	e := &x.entries[i]
	var b []byte
	if !e.delta() {
		if e.size > maxResolved {
			return nil, packErr("%s %x (%s) is the base of a delta: larger than the %s the git server resolves in memory", plumbing.ObjectType(e.kind), e.hash, mib(e.size), mib(maxResolved))
		}
		var err error
		if b, err = x.inflateAt(e); err != nil {
			return nil, err
		}
	} else {
		base, err := x.content(e.base)
		if err != nil {
			return nil, err
		}
		delta, err := x.inflateAt(e)
		if err != nil {
			return nil, err
		}
		if b, err = packfile.PatchDelta(base, delta); err != nil {
			return nil, packErr("delta at offset %d: %v", e.offset, err)
		}
		if int64(len(b)) != e.objSize {
			return nil, packErr("delta at offset %d: makes %d bytes, not the %d it declares", e.offset, len(b), e.objSize)
		}
	}
	x.cache.put(i, b)
	return b, nil
}

// streamDelta applies delta to base and writes the result, of size bytes,
// to w without holding it.
func streamDelta(w io.Writer, base, delta []byte, size int64) error {
	if len(base) == 0 {
		return packfile.ErrInvalidDelta
	}
	r, err := packfile.ReaderFromDelta(bytesObject(base), bytes.NewReader(delta))
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := io.Copy(w, r)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("makes %d bytes, not the %d it declares", n, size)
	}
	return nil
}

// bytesObject is a base for packfile.ReaderFromDelta, read in place.
type bytesObject []byte

func (b bytesObject) Hash() plumbing.Hash             { return plumbing.ZeroHash }
func (b bytesObject) Type() plumbing.ObjectType       { return plumbing.BlobObject }
func (b bytesObject) SetType(plumbing.ObjectType)     {}
func (b bytesObject) Size() int64                     { return int64(len(b)) }
func (b bytesObject) SetSize(int64)                   {}
func (b bytesObject) Writer() (io.WriteCloser, error) { return nil, errReadOnly }
func (b bytesObject) Reader() (io.ReadCloser, error)  { return io.NopCloser(bytes.NewReader(b)), nil }

// inflateAt reads entry e's stored bytes (≤ maxResolved) from the pack.
func (x *packIndexer) inflateAt(e *packEntry) ([]byte, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(x.f, e.offset+int64(e.hdr), x.end-e.offset-int64(e.hdr)), 32<<10)
	if err := x.resetZlib(r); err != nil {
		return nil, packErr("offset %d: %v", e.offset, err)
	}
	b := make([]byte, e.size)
	if _, err := io.ReadFull(x.zr, b); err != nil {
		return nil, packErr("offset %d: %v", e.offset, err)
	}
	return b, nil
}

// sorted returns the entries' indexes in hash order; an object twice in
// the pack is refused.
func (x *packIndexer) sorted() ([]int32, error) {
	order := make([]int32, len(x.entries))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return bytes.Compare(x.entries[a].hash[:], x.entries[b].hash[:]) })
	for k := 1; k < len(order); k++ {
		if x.entries[order[k]].hash == x.entries[order[k-1]].hash {
			return nil, packErr("object %x is twice in the pack", x.entries[order[k]].hash)
		}
	}
	return order, nil
}

// writeIdx writes the pack's index, version 2 (gitformat-pack).
func (x *packIndexer) writeIdx(path string, order []int32) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	h := sha1.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 64<<10)
	var b4 [4]byte
	put32 := func(v uint32) {
		binary.BigEndian.PutUint32(b4[:], v)
		w.Write(b4[:])
	}
	w.Write([]byte{0xff, 't', 'O', 'c'})
	put32(2)
	var fanout [256]uint32
	for _, i := range order {
		fanout[x.entries[i].hash[0]]++
	}
	var total uint32
	for _, c := range fanout {
		total += c
		put32(total)
	}
	for _, i := range order {
		w.Write(x.entries[i].hash[:])
	}
	for _, i := range order {
		put32(x.entries[i].crc)
	}
	var large []int64
	for _, i := range order {
		off := x.entries[i].offset
		if off < 1<<31 {
			put32(uint32(off))
			continue
		}
		put32(1<<31 | uint32(len(large)))
		large = append(large, off)
	}
	var b8 [8]byte
	for _, off := range large {
		binary.BigEndian.PutUint64(b8[:], uint64(off))
		w.Write(b8[:])
	}
	w.Write(x.checksum[:])
	err = w.Flush()
	if err == nil {
		_, err = f.Write(h.Sum(nil))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeTable writes the object table, in the .idx's order.
func (x *packIndexer) writeTable(path string, order []int32) error {
	pos := make([]int32, len(x.entries))
	for k, i := range order {
		pos[i] = int32(k)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	w.Write(tableMagic[:])
	var b [tableRecord]byte
	binary.BigEndian.PutUint32(b[:4], uint32(len(order)))
	w.Write(b[:tableHeader-len(tableMagic)])
	for _, i := range order {
		e := &x.entries[i]
		clear(b[:])
		copy(b[:20], e.hash[:])
		b[20] = byte(e.typ)
		b[21] = byte(e.kind)
		binary.BigEndian.PutUint64(b[24:32], uint64(e.objSize))
		base := uint32(math.MaxUint32)
		if e.delta() {
			binary.BigEndian.PutUint32(b[32:36], uint32(e.size))
			base = uint32(pos[e.base])
		}
		binary.BigEndian.PutUint32(b[36:40], base)
		w.Write(b[:])
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// objectHasher starts an object's id: the hash of its header and content.
func objectHasher(t plumbing.ObjectType, size int64) hash.Hash {
	h := sha1.New()
	h.Write(t.Bytes())
	h.Write([]byte{' '})
	h.Write(strconv.AppendInt(nil, size, 10))
	h.Write([]byte{0})
	return h
}

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

// resolveCache keeps resolved objects by entry, up to a total size, and
// drops the least recently used first.
type resolveCache struct {
	max, size int
	ll        *list.List
	m         map[int32]*list.Element
}

type cached struct {
	i int32
	b []byte
}

func newResolveCache(max int) *resolveCache {
	return &resolveCache{max: max, ll: list.New(), m: map[int32]*list.Element{}}
}

func (c *resolveCache) get(i int32) ([]byte, bool) {
	el, ok := c.m[i]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(el)
	return el.Value.(*cached).b, true
}

func (c *resolveCache) put(i int32, b []byte) {
	if len(b) > c.max {
		return
	}
	if _, ok := c.m[i]; ok {
		return
	}
	c.m[i] = c.ll.PushFront(&cached{i, b})
	c.size += len(b)
	for c.size > c.max {
		el := c.ll.Back()
		v := el.Value.(*cached)
		c.ll.Remove(el)
		delete(c.m, v.i)
		c.size -= len(v.b)
	}
}
