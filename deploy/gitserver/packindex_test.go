package gitserver

import (
	"bytes"
	"context"
	"crypto/sha1"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestIndexPackMatchesGit: the .idx made for a pack Debian's git wrote
// (a history of edits: deltas on deltas) is byte for byte the one `git
// index-pack` makes, and the object table agrees with `git cat-file`.
func TestIndexPackMatchesGit(t *testing.T) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitPath, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	src := t.TempDir()
	run(src, "init", "-q", "-b", "main")
	for c := range 12 {
		for f := range 8 {
			var b strings.Builder
			for l := range 300 {
				fmt.Fprintf(&b, "file %d line %d: %d\n", f, l, (l*c)%(f+3))
			}
			os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d.txt", f)), []byte(b.String()), 0o644)
		}
		run(src, "add", "-A")
		run(src, "commit", "-q", "-m", fmt.Sprint(c))
	}
	run(src, "repack", "-q", "-a", "-d", "--depth=50", "--window=50")
	packs, _ := filepath.Glob(filepath.Join(src, ".git", "objects", "pack", "pack-*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs: %v", packs)
	}
	want, err := os.ReadFile(strings.TrimSuffix(packs[0], ".pack") + ".idx")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(run(src, "verify-pack", "-v", packs[0]), "chain length = 2") {
		t.Fatal("git made no delta chains")
	}

	dir := t.TempDir()
	packDir := filepath.Join(dir, "objects", "pack")
	os.MkdirAll(packDir, 0o700)
	b, _ := os.ReadFile(packs[0])
	f, err := os.Create(filepath.Join(packDir, "tmp.pack"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(b)
	sum, err := indexPack(context.Background(), f, dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(packDir, "pack-"+sum+".idx"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf(".idx differs from git's (%d bytes, git's %d)", len(got), len(want))
	}
	table, err := loadObjectTable(filepath.Join(dir, objectTableName))
	if err != nil {
		t.Fatal(err)
	}
	check := run(src, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype) %(objectsize) %(deltabase)")
	n := 0
	for line := range strings.Lines(check) {
		var id, typ, base string
		var size int64
		fmt.Sscan(line, &id, &typ, &size, &base)
		rec, ok := table.find(plumbing.NewHash(id))
		if !ok || rec.typ.String() != typ || rec.size != size {
			t.Errorf("%s: table %+v, %v; git says %s %d", id, rec, ok, typ, size)
		}
		if isDelta := base != strings.Repeat("0", 40); isDelta != (rec.base >= 0) || isDelta && table.hashAt(rec.base).String() != base {
			t.Errorf("%s: delta base in the table %d, git says %s", id, rec.base, base)
		}
		n++
	}
	if n != table.n {
		t.Errorf("%d objects in the table, git lists %d", table.n, n)
	}
}
