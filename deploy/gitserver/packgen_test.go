package gitserver_test

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
)

// Packs built by hand, for the indexer's hostile inputs: objects stored
// whole or as OFS and REF deltas, with sizes and counts as the test says
// rather than as git would write them.

// Pack entry types.
const (
	objCommit = 1
	objTree   = 2
	objBlob   = 3
	objTag    = 4
	objOFS    = 6
	objREF    = 7
)

type packBuilder struct {
	buf   bytes.Buffer
	count uint32 // declared in the header (set by finish when 0)
	n     uint32
}

func newPackBuilder() *packBuilder {
	p := &packBuilder{}
	p.buf.Write(make([]byte, 12)) // header, written by finish
	return p
}

// objectID is git's id of an object: SHA-1 of its header and content.
func objectID(typ int, data []byte) [20]byte {
	name := map[int]string{objCommit: "commit", objTree: "tree", objBlob: "blob", objTag: "tag"}[typ]
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", name, len(data))
	h.Write(data)
	var id [20]byte
	copy(id[:], h.Sum(nil))
	return id
}

func hexID(id [20]byte) string { return hex.EncodeToString(id[:]) }

// entry writes an entry of typ whose header declares size and whose zlib
// stream holds data; it returns the entry's offset.
func (p *packBuilder) entry(typ int, size int64, prefix, data []byte) int64 {
	off := int64(p.buf.Len())
	c := byte(typ<<4) | byte(size&0x0f)
	size >>= 4
	for size > 0 {
		p.buf.WriteByte(c | 0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	p.buf.WriteByte(c)
	p.buf.Write(prefix)
	zw, _ := zlib.NewWriterLevel(&p.buf, zlib.BestSpeed)
	zw.Write(data)
	zw.Close()
	p.n++
	return off
}

// whole stores an object whole.
func (p *packBuilder) whole(typ int, data []byte) (int64, [20]byte) {
	return p.entry(typ, int64(len(data)), nil, data), objectID(typ, data)
}

// ofs stores a delta on the entry at base.
func (p *packBuilder) ofs(base int64, delta []byte) int64 {
	off := int64(p.buf.Len())
	rel := off - base
	// git's offset encoding: big-endian groups of 7 bits, each but the
	// last less one.
	b := []byte{byte(rel & 0x7f)}
	for rel >>= 7; rel > 0; rel >>= 7 {
		rel--
		b = append(b, 0x80|byte(rel&0x7f))
	}
	slices.Reverse(b)
	return p.entry(objOFS, int64(len(delta)), b, delta)
}

// ref stores a delta on the object base.
func (p *packBuilder) ref(base [20]byte, delta []byte) int64 {
	return p.entry(objREF, int64(len(delta)), base[:], delta)
}

// finish writes the header (count declared, or the entries written) and
// the trailer.
func (p *packBuilder) finish() []byte {
	b := p.buf.Bytes()
	copy(b, "PACK")
	binary.BigEndian.PutUint32(b[4:], 2)
	count := p.count
	if count == 0 {
		count = p.n
	}
	binary.BigEndian.PutUint32(b[8:], count)
	sum := sha1.Sum(b)
	return append(slices.Clone(b), sum[:]...)
}

// deltaOf is a delta from a base of srcSize bytes: copy [0, copyLen) of
// the base, then insert ins.
func deltaOf(srcSize, copyLen int, ins []byte) []byte {
	d := binary.AppendUvarint(nil, uint64(srcSize))
	d = binary.AppendUvarint(d, uint64(copyLen+len(ins)))
	for off := 0; off < copyLen; {
		n := min(copyLen-off, 0xffffff)
		d = append(d, 0x80|0x0f|0x70,
			byte(off), byte(off>>8), byte(off>>16), byte(off>>24),
			byte(n), byte(n>>8), byte(n>>16))
		off += n
	}
	for len(ins) > 0 {
		n := min(len(ins), 127)
		d = append(d, byte(n))
		d = append(d, ins[:n]...)
		ins = ins[n:]
	}
	return d
}

// treeOf is a tree of regular files named by their blobs' ids.
func treeOf(names []string, ids [][20]byte) []byte {
	type ent struct {
		name string
		id   [20]byte
	}
	var es []ent
	for i := range names {
		es = append(es, ent{names[i], ids[i]})
	}
	slices.SortFunc(es, func(a, b ent) int { return bytes.Compare([]byte(a.name), []byte(b.name)) })
	var b bytes.Buffer
	for _, e := range es {
		b.WriteString("100644 " + e.name + "\x00")
		b.Write(e.id[:])
	}
	return b.Bytes()
}

func commitOf(tree [20]byte) []byte {
	return []byte("tree " + hexID(tree) + "\nauthor T <t@example.com> 1704164705 +0000\ncommitter T <t@example.com> 1704164705 +0000\n\nhand-made\n")
}

// bundleOf is a v2 bundle of pack with main at commit.
func bundleOf(commit [20]byte, pack []byte) []byte {
	return append([]byte("# v2 git bundle\n"+hexID(commit)+" refs/heads/main\n\n"), pack...)
}

// handRepo is a bundle built by hand, and its commit.
type handRepo struct {
	bundle []byte
	commit string
}

// deltaBomb is a repository whose one blob of baseSize bytes stored whole
// is the base of n deltas, each the whole base and a line of its own:
// a pack of little more than baseSize that resolves to n+1 times it.
func deltaBomb(baseSize, n int, useRef bool) handRepo {
	p := newPackBuilder()
	base := bytes.Repeat([]byte("0123456789abcdef"), baseSize/16)
	for i := range base {
		base[i] ^= byte(i * 7 >> 5) // not all alike: deltas that copy it are still cheap
	}
	baseOff, baseID := p.whole(objBlob, base)
	names, ids := []string{"base"}, [][20]byte{baseID}
	for i := range n {
		ins := []byte("\nvariant " + strconv.Itoa(i) + "\n")
		d := deltaOf(len(base), len(base), ins)
		if useRef {
			p.ref(baseID, d)
		} else {
			p.ofs(baseOff, d)
		}
		names = append(names, fmt.Sprintf("v%04d", i))
		ids = append(ids, objectID(objBlob, append(slices.Clone(base), ins...)))
	}
	_, tree := p.whole(objTree, treeOf(names, ids))
	_, commit := p.whole(objCommit, commitOf(tree))
	return handRepo{bundle: bundleOf(commit, p.finish()), commit: hexID(commit)}
}
