package gitserver

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/format/packfile"
)

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
