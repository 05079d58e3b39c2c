package backup

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
)

// hostileManifests writes blobs into a file and returns the file, a record
// listing them (all as mediaType mt) and their spans in order.
func hostileManifests(t *testing.T, mt string, blobs [][]byte) (*os.File, *Record, map[digest.Digest]int, []span) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	rec := &Record{}
	idx := map[digest.Digest]int{}
	var spans []span
	var off int64
	for _, b := range blobs {
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		d := digest.FromBytes(b)
		if _, ok := idx[d]; !ok {
			idx[d] = len(rec.Blobs)
			rec.Blobs = append(rec.Blobs, Blob{Digest: d, Size: int64(len(b)), MediaType: mt})
		}
		spans = append(spans, span{digest: d, off: off, size: int64(len(b))})
		off += int64(len(b))
	}
	return f, rec, idx, spans
}

func index(kids ...digest.Digest) []byte {
	var m ocispec.Index
	m.SchemaVersion = 2
	m.MediaType = ocispec.MediaTypeImageIndex
	for _, k := range kids {
		m.Manifests = append(m.Manifests, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: k, Size: 1})
	}
	b, _ := json.Marshal(m)
	return b
}

// TestManifestLevelsHostile: manifests that do not parse are refused in
// one line naming them, before anything is pushed; a manifest listed twice
// goes up once; a subject or child later in the file does not hold a
// manifest back; 100,000 manifests (one chain, each naming the one before)
// are ordered in bounded time and memory.
func TestManifestLevelsHostile(t *testing.T) {
	bad := []byte(`{"schemaVersion":2,"manifests":"not a list"}`)
	f, rec, idx, spans := hostileManifests(t, ocispec.MediaTypeImageIndex, [][]byte{index(), bad})
	_, err := manifestLevels(f, rec, idx, spans)
	if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), digest.FromBytes(bad).String()) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a manifest that does not parse: %v", err)
	}
	t.Logf("refused: %v", err)

	a := index()
	b := index(digest.FromBytes(a))
	f, rec, idx, spans = hostileManifests(t, ocispec.MediaTypeImageIndex, [][]byte{a, b, a, b})
	levels, err := manifestLevels(f, rec, idx, spans)
	if err != nil || len(levels) != 2 || len(levels[0]) != 1 || len(levels[1]) != 1 {
		t.Fatalf("two manifests each listed twice: %v, %v", levels, err)
	}

	const n = 100_000
	chain := make([][]byte, n)
	prev := digest.Digest("")
	for i := range chain {
		if i == 0 {
			chain[i] = index()
		} else {
			chain[i] = index(prev)
		}
		prev = digest.FromBytes(chain[i])
	}
	f, rec, idx, spans = hostileManifests(t, ocispec.MediaTypeImageIndex, chain)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	t0 := time.Now()
	levels, err = manifestLevels(f, rec, idx, spans)
	el := time.Since(t0)
	runtime.ReadMemStats(&m1)
	if err != nil || len(levels) != n {
		t.Fatalf("a chain of %d: %d levels, %v", n, len(levels), err)
	}
	t.Logf("%d manifests in a chain: %v, %d MiB allocated", n, el, (m1.TotalAlloc-m0.TotalAlloc)>>20)
	if el > 20*time.Second {
		t.Errorf("%d manifests ordered in %v", n, el)
	}
}
