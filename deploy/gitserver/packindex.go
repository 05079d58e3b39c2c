package gitserver

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/go-git/go-git/v6/plumbing"
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
