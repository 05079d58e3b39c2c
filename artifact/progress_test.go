package artifact_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// moving records, per blob, the bytes its Partial events said, and
// whether its own event had come when each arrived.
type moving struct {
	mu      sync.Mutex
	partial map[digest.Digest][]int64
	sizes   map[digest.Digest]int64
	done    map[digest.Digest]bool
	late    []digest.Digest // Partial events after the blob's own
}

func (m *moving) record() artifact.ProgressFunc {
	m.partial, m.sizes, m.done = map[digest.Digest][]int64{}, map[digest.Digest]int64{}, map[digest.Digest]bool{}
	return func(ev artifact.Progress) {
		if ev.Desc.Digest == "" {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		d := ev.Desc.Digest
		m.sizes[d] = ev.Desc.Size
		if !ev.Partial {
			m.done[d] = true
			return
		}
		if m.done[d] {
			m.late = append(m.late, d)
		}
		m.partial[d] = append(m.partial[d], ev.Bytes)
	}
}

// check: some blob was reported as it moved, in at least two steps; every
// Partial event says more bytes than the one before, fewer than the
// blob's size, at least PartialStep apart, and comes before the blob's own.
func (m *moving) check(t *testing.T, what string) {
	t.Helper()
	steps := 0
	for d, ns := range m.partial {
		steps = max(steps, len(ns))
		for i, n := range ns {
			if n >= m.sizes[d] || i > 0 && n-ns[i-1] < artifact.PartialStep {
				t.Errorf("%s: blob %s of %d bytes: Partial events at %v", what, d, m.sizes[d], ns)
				break
			}
		}
		if !m.done[d] {
			t.Errorf("%s: blob %s reported moving, never done", what, d)
		}
	}
	if steps < 2 || len(m.late) > 0 {
		t.Errorf("%s: at most %d Partial events for a blob of 16 MiB; %d came after their blob's own", what, steps, len(m.late))
	}
}

// TestProgressMovesInBytes: a large blob is reported while it moves, not
// only once it has — created, pushed (sent from the file by sendfile(2)),
// pulled — so that a user sees the bytes go, not 150 MiB jumps.
func TestProgressMovesInBytes(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	dir := t.TempDir()
	genImageSet(t, dir, 64) // one image, four layers of 16 MiB
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), "p.tar.zst")
	var created moving
	if _, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, Progress: created.record()}); err != nil {
		t.Fatal(err)
	}
	created.check(t, "create")

	ref := w.Host + "/moving/p:1"
	var pushed moving
	if _, err := artifact.Push(ctx, openPkg(t, pkg), ref, artifact.PushOptions{Progress: pushed.record()}); err != nil {
		t.Fatal(err)
	}
	pushed.check(t, "push")

	var pulled moving
	if _, err := pullRemote(ctx, ref, filepath.Join(t.TempDir(), "pulled.tar.zst"), artifact.PullOptions{Progress: pulled.record()}); err != nil {
		t.Fatal(err)
	}
	pulled.check(t, "pull")
}

// TestSplitReportsProgress: a split reports the archive read (verified),
// then its copy into parts in bytes, each part named, up to the whole.
func TestSplitReportsProgress(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	genImageSet(t, dir, 64)
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), "p.tar.zst")
	res, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: pkg})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reads := 0
	var writes []artifact.Progress
	ps, err := artifact.Split(ctx, pkg, artifact.SplitOptions{PartSize: 16 << 20, Progress: func(ev artifact.Progress) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Phase {
		case artifact.PhaseRead:
			reads++
		case artifact.PhaseWrite:
			writes = append(writes, ev)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if reads == 0 || len(writes) < 4 {
		t.Fatalf("%d read events, %d write events for %d parts", reads, len(writes), len(ps.Parts))
	}
	for i, ev := range writes {
		if i > 0 && ev.Bytes <= writes[i-1].Bytes || ev.TotalBytes != res.Size || !strings.HasPrefix(ev.Item, "part ") {
			t.Fatalf("write event %d: %+v (archive %d bytes)", i, ev, res.Size)
		}
	}
	if last := writes[len(writes)-1]; last.Bytes != res.Size || last.Item != fmt.Sprintf("part %d of %d", len(ps.Parts), len(ps.Parts)) {
		t.Errorf("last write event %+v, want all %d bytes in part %d", last, res.Size, len(ps.Parts))
	}
}
