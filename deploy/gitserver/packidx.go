package gitserver

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"hash"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/go-git/go-git/v6/plumbing"
)

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
