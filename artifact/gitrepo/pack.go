package gitrepo

import (
	"bytes"
	"cmp"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	gitbinary "github.com/go-git/go-git/v5/utils/binary"
)

// Delta compression of a pack, as go-git's encoder does it (objects sorted
// by type, then size, each tried against the previous ones of its type in a
// window), but bounded: objects larger than deltaMax are never held in
// memory — they are streamed from the repository into the pack whole — so
// memory is at most about deltaWindow × deltaMax whatever the repository
// holds. go-git's encoder reads every object it considers for a delta into
// memory, a file of gigabytes included.
const (
	deltaWindow = 10
	deltaMax    = 1 << 20
	deltaDepth  = 50
)

// packObject is one object of a pack being written.
type packObject struct {
	hash   plumbing.Hash
	typ    plumbing.ObjectType
	size   int64
	offset int64
	depth  int
	data   []byte // while in the window
}

// writePack writes a pack (version 2) of objs, read from st, to w. The
// same objects give the same bytes, whatever the repository's own packs
// hold: deltas are computed here (OFS_DELTA, blobs and trees of at most
// deltaMax bytes), never reused.
func writePack(w io.Writer, st storer.EncodedObjectStorer, objs []plumbing.Hash) error {
	list := make([]*packObject, 0, len(objs))
	for _, h := range objs {
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		list = append(list, &packObject{hash: h, typ: o.Type(), size: o.Size()})
	}
	slices.SortFunc(list, func(a, b *packObject) int {
		if c := cmp.Compare(a.typ, b.typ); c != 0 {
			return c
		}
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return bytes.Compare(a.hash[:], b.hash[:])
	})

	sum := sha1.New()
	ow := &offsetWriter{w: io.MultiWriter(w, sum)}
	var head [12]byte
	copy(head[:], "PACK")
	binary.BigEndian.PutUint32(head[4:], 2)
	binary.BigEndian.PutUint32(head[8:], uint32(len(list)))
	if _, err := ow.Write(head[:]); err != nil {
		return err
	}
	zw := zlib.NewWriter(io.Discard)
	var window []*packObject
	for _, o := range list {
		o.offset = ow.n
		deltable := (o.typ == plumbing.BlobObject || o.typ == plumbing.TreeObject) && o.size <= deltaMax
		if !deltable {
			if err := writeWhole(ow, zw, st, o); err != nil {
				return err
			}
			continue
		}
		data, err := readObject(st, o)
		if err != nil {
			return err
		}
		base, delta := bestDelta(window, o, data)
		if base != nil {
			o.depth = base.depth + 1
			if err := writeEntry(ow, zw, plumbing.OFSDeltaObject, int64(len(delta)), o.offset-base.offset, bytes.NewReader(delta)); err != nil {
				return err
			}
		} else if err := writeEntry(ow, zw, o.typ, o.size, 0, bytes.NewReader(data)); err != nil {
			return err
		}
		o.data = data
		window = append(window, o)
		if len(window) > deltaWindow {
			window[0].data = nil
			window = window[1:]
		}
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

// bestDelta is the smallest delta of data against an object of the window
// of the same type, if one is less than half of data; nil if none is.
func bestDelta(window []*packObject, o *packObject, data []byte) (*packObject, []byte) {
	var base *packObject
	var best []byte
	for i := len(window) - 1; i >= 0; i-- {
		b := window[i]
		if b.typ != o.typ || b.depth >= deltaDepth || o.size < b.size>>4 || len(b.data) == 0 {
			continue
		}
		d := packfile.DiffDelta(b.data, data)
		if int64(len(d)) < o.size/2 && (best == nil || len(d) < len(best)) {
			base, best = b, d
		}
	}
	return base, best
}

func readObject(st storer.EncodedObjectStorer, o *packObject) ([]byte, error) {
	eo, err := st.EncodedObject(o.typ, o.hash)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", o.hash, err)
	}
	rc, err := eo.Reader()
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", o.hash, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, o.size+1))
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", o.hash, err)
	}
	if int64(len(data)) != o.size {
		return nil, fmt.Errorf("object %s: %d bytes, its header says %d", o.hash, len(data), o.size)
	}
	return data, nil
}

// writeWhole streams o from st into the pack.
func writeWhole(ow *offsetWriter, zw *zlib.Writer, st storer.EncodedObjectStorer, o *packObject) error {
	eo, err := st.EncodedObject(o.typ, o.hash)
	if err != nil {
		return fmt.Errorf("object %s: %w", o.hash, err)
	}
	rc, err := eo.Reader()
	if err != nil {
		return fmt.Errorf("object %s: %w", o.hash, err)
	}
	defer rc.Close()
	return writeEntry(ow, zw, o.typ, o.size, 0, rc)
}

// writeEntry writes one pack entry: its header (type and size; for an
// OFS_DELTA, the distance back to its base) and its content, deflated. The
// content must be exactly size bytes.
func writeEntry(ow *offsetWriter, zw *zlib.Writer, typ plumbing.ObjectType, size, back int64, r io.Reader) error {
	hdr := make([]byte, 0, 16)
	c := byte(typ)<<4 | byte(size&0x0f)
	for s := size >> 4; s > 0; s >>= 7 {
		hdr = append(hdr, c|0x80)
		c = byte(s & 0x7f)
	}
	hdr = append(hdr, c)
	if _, err := ow.Write(hdr); err != nil {
		return err
	}
	if typ == plumbing.OFSDeltaObject {
		if err := gitbinary.WriteVariableWidthInt(ow, back); err != nil {
			return err
		}
	}
	zw.Reset(ow)
	n, err := io.Copy(zw, io.LimitReader(r, size+1))
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("object content: %d bytes, its header says %d", n, size)
	}
	return zw.Close()
}

// offsetWriter counts the bytes written through it.
type offsetWriter struct {
	w io.Writer
	n int64
}

func (o *offsetWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	o.n += int64(n)
	return n, err
}
