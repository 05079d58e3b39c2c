package gitserver

import (
	"crypto/sha1"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/format/idxfile"
)

// TestWriteIdxLargeOffsets: objects past 2 GiB in a pack (after a file of
// gigabytes) get the .idx's 64-bit offsets, as go-git reads them, and the
// object table lists them in the .idx's order.
func TestWriteIdxLargeOffsets(t *testing.T) {
	x := &packIndexer{checksum: [20]byte{1, 2, 3}}
	offsets := []int64{12, 1<<31 - 1, 1 << 31, 3<<30 + 17, 5 << 32}
	for i, off := range offsets {
		e := packEntry{offset: off, crc: uint32(i) * 7, kind: 3, typ: 3, objSize: int64(i), base: -1}
		e.hash = sha1.Sum([]byte{byte(i)})
		x.entries = append(x.entries, e)
	}
	order, err := x.sorted()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "pack.idx")
	if err := x.writeIdx(path, order); err != nil {
		t.Fatal(err)
	}
	if err := x.writeTable(filepath.Join(dir, objectTableName), order); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex(20)
	if err := idxfile.NewDecoder(f, sha1.New()).Decode(idx); err != nil {
		t.Fatal(err)
	}
	table, err := loadObjectTable(filepath.Join(dir, objectTableName))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range x.entries {
		h, _ := plumbing.FromBytes(e.hash[:])
		off, err := idx.FindOffset(h)
		if err != nil || off != offsets[i] {
			t.Errorf("object %d: offset %d, %v; want %d", i, off, err, offsets[i])
		}
		if crc, err := idx.FindCRC32(h); err != nil || crc != e.crc {
			t.Errorf("object %d: crc %d, %v; want %d", i, crc, err, e.crc)
		}
		if rec, ok := table.find(h); !ok || rec.size != int64(i) || rec.typ != plumbing.BlobObject || rec.base != -1 {
			t.Errorf("object %d: table %+v, %v", i, rec, ok)
		}
	}
}
