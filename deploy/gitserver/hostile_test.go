package gitserver_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/gitserver"
)

// syncBuffer is a log the server writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHostilePacks: packs that break the indexer's limits or git's pack
// format, each built by hand, are refused (502, the reason logged) in
// bounded time; a well-formed one with OFS and REF deltas in chains is
// cloned by Debian's git.
func TestHostilePacks(t *testing.T) {
	blob := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	withCommit := func(p *packBuilder, names []string, ids [][20]byte) handRepo {
		_, tree := p.whole(objTree, treeOf(names, ids))
		_, commit := p.whole(objCommit, commitOf(tree))
		return handRepo{bundle: bundleOf(commit, p.finish()), commit: hexID(commit)}
	}
	cases := map[string]struct {
		make func() handRepo
		want string
	}{
		"big base": {func() handRepo {
			p := newPackBuilder()
			b := blob(33 << 20)
			off, id := p.whole(objBlob, b)
			p.ofs(off, deltaOf(len(b), 10, []byte("!")))
			return withCommit(p, []string{"a"}, [][20]byte{id})
		}, "makes an object of 11 bytes from one of 33 MiB"},
		"big result": {func() handRepo {
			p := newPackBuilder()
			b := blob(1024)
			off, id := p.whole(objBlob, b)
			// 40 MiB from 1 KiB: copies of the whole base, 8 bytes each.
			d := binary.AppendUvarint(nil, 1024)
			d = binary.AppendUvarint(d, 40<<20)
			for range (40 << 20) / 1024 {
				d = append(d, 0x80|0x10|0x20, 0x00, 0x04)
			}
			p.ofs(off, d)
			return withCommit(p, []string{"a"}, [][20]byte{id})
		}, "resolves in memory"},
		"big tree": {func() handRepo {
			p := newPackBuilder()
			_, tree := p.whole(objTree, blob(33<<20))
			_, commit := p.whole(objCommit, commitOf(tree))
			return handRepo{bundle: bundleOf(commit, p.finish()), commit: hexID(commit)}
		}, "reads whole"},
		"too many objects": {func() handRepo {
			p := newPackBuilder()
			p.count = 1<<20 + 1
			return withCommit(p, nil, nil)
		}, "more than the 1048576"},
		"long chain": {func() handRepo {
			p := newPackBuilder()
			b := blob(64)
			off, id := p.whole(objBlob, b)
			for range 4100 {
				off = p.ofs(off, deltaOf(64, 64, nil))
			}
			return withCommit(p, []string{"a"}, [][20]byte{id})
		}, "a chain of more than 4095"},
		"ref cycle": {func() handRepo {
			p := newPackBuilder()
			a, b := objectID(objBlob, []byte("a")), objectID(objBlob, []byte("b"))
			p.ref(b, deltaOf(1, 1, nil))
			p.ref(a, deltaOf(1, 1, nil))
			return withCommit(p, []string{"a"}, [][20]byte{a})
		}, "its base is not in the pack"},
		"thin": {func() handRepo {
			p := newPackBuilder()
			p.ref(objectID(objBlob, []byte("elsewhere")), deltaOf(9, 9, nil))
			return withCommit(p, nil, nil)
		}, "its base is not in the pack"},
		"twice": {func() handRepo {
			p := newPackBuilder()
			_, id := p.whole(objBlob, []byte("same"))
			p.whole(objBlob, []byte("same"))
			return withCommit(p, []string{"a"}, [][20]byte{id})
		}, "twice in the pack"},
		"ofs mid-entry": {func() handRepo {
			p := newPackBuilder()
			off, id := p.whole(objBlob, blob(100))
			p.ofs(off+1, deltaOf(100, 100, nil))
			return withCommit(p, []string{"a"}, [][20]byte{id})
		}, "no object at its base offset"},
		"size lies": {func() handRepo {
			p := newPackBuilder()
			p.entry(objBlob, 5, nil, []byte("more than five"))
			return withCommit(p, nil, nil)
		}, "inflates to more than"},
		"size short": {func() handRepo {
			p := newPackBuilder()
			p.entry(objBlob, 50, nil, []byte("less"))
			return withCommit(p, nil, nil)
		}, "not the 50 its header says"},
		"delta base size": {func() handRepo {
			p := newPackBuilder()
			off, id := p.whole(objBlob, blob(10))
			p.ofs(off, deltaOf(5, 5, nil))
			return withCommit(p, []string{"a"}, [][20]byte{id})
		}, "delta at offset"},
		"bad type": {func() handRepo {
			p := newPackBuilder()
			p.entry(5, 3, nil, []byte("abc"))
			return withCommit(p, nil, nil)
		}, "type 5"},
		"checksum": {func() handRepo {
			r := withCommit(newPackBuilder(), nil, nil)
			r.bundle[len(r.bundle)-1] ^= 1
			return r
		}, "does not match its content"},
		"trailing": {func() handRepo {
			r := withCommit(newPackBuilder(), nil, nil)
			r.bundle = append(r.bundle, "junk"...)
			return r
		}, "after the pack's trailer"},
		"truncated": {func() handRepo {
			p := newPackBuilder()
			_, id := p.whole(objBlob, blob(1000))
			r := withCommit(p, []string{"a"}, [][20]byte{id})
			r.bundle = r.bundle[:len(r.bundle)-40]
			return r
		}, "pack"},
		"not a pack": {func() handRepo {
			r := withCommit(newPackBuilder(), nil, nil)
			i := bytes.Index(r.bundle, []byte("PACK"))
			copy(r.bundle[i:], "KCAP")
			return r
		}, "no PACK signature"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			hr := c.make()
			repo, _ := repoOf("refs/heads/main", hr.commit, hr.bundle)
			var log syncBuffer
			url, _ := serve(t, lookupOf(repo), gitserver.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
			start := time.Now()
			resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("%s, want 502", resp.Status)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("refused after %s", d)
			}
			if got := log.String(); !strings.Contains(got, c.want) || !strings.Contains(got, "git bundle") {
				t.Errorf("log %q: want the reason %q", got, c.want)
			}
		})
	}

	t.Run("well-formed", func(t *testing.T) {
		// A chain base → OFS → REF → OFS, and REF deltas on a base
		// written after them.
		p := newPackBuilder()
		base := bytes.Repeat([]byte("line of text\n"), 500)
		var names []string
		var ids [][20]byte
		add := func(name string, data []byte) {
			names, ids = append(names, name), append(ids, objectID(objBlob, data))
		}
		later := objectID(objBlob, []byte("the base comes later\n"))
		p.ref(later, deltaOf(21, 21, []byte("and a line\n")))
		add("later2", []byte("the base comes later\nand a line\n"))
		off, _ := p.whole(objBlob, base)
		add("a", base)
		v1 := append(bytes.Clone(base), "one\n"...)
		off1 := p.ofs(off, deltaOf(len(base), len(base), []byte("one\n")))
		add("b", v1)
		v2 := append(bytes.Clone(v1), "two\n"...)
		p.ref(objectID(objBlob, v1), deltaOf(len(v1), len(v1), []byte("two\n")))
		add("c", v2)
		v3 := append(bytes.Clone(v1), "three\n"...)
		p.ofs(off1, deltaOf(len(v1), len(v1), []byte("three\n")))
		add("d", v3)
		p.whole(objBlob, []byte("the base comes later\n"))
		add("later", []byte("the base comes later\n"))
		hr := withCommit(p, names, ids)
		repo, _ := repoOf("refs/heads/main", hr.commit, hr.bundle)
		url, _ := serve(t, lookupOf(repo))
		dst := filepath.Join(t.TempDir(), "clone")
		mustGit(t, "", "clone", "-q", url, dst)
		mustGit(t, dst, "fsck", "--no-progress")
		if got := mustGit(t, dst, "rev-parse", "HEAD"); got != hr.commit {
			t.Errorf("HEAD = %s, want %s", got, hr.commit)
		}
		if got := mustGit(t, dst, "show", "HEAD:c"); got != strings.TrimSpace(string(v2)) {
			t.Errorf("c: %q", got)
		}
	})
}
