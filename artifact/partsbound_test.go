package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
)

// writeIndex writes ps as the parts index at path.
func writeIndex(t testing.TB, path string, ps *artifact.Parts) {
	t.Helper()
	data, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSplitSparsePart: a part that an index declares, and a sparse file
// makes, 16 GiB or 1 TiB, with a digest that is not its own, is refused in
// well under a second by its size, never hashed: holding a package whose
// head says how large its archive can be, and holding zeros, where no head
// can be read.
func TestSplitSparsePart(t *testing.T) {
	ctx := context.Background()
	pkg := smallPackage(t, filepath.Join(t.TempDir(), "small.tar.zst"), 64<<10)
	archive, err := os.ReadFile(pkg.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{16 << 30, 1 << 40} {
		for _, tc := range []struct {
			name, what string
			head       []byte
		}{
			{"a package, then zeros", "past the", archive},
			{"zeros", "too large to hash", nil},
		} {
			t.Run(fmt.Sprintf("%d GiB/%s", size>>30, tc.name), func(t *testing.T) {
				dir := t.TempDir()
				part := filepath.Join(dir, "pkg.tar.zst.part001")
				if err := os.WriteFile(part, tc.head, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(part, size); err != nil {
					t.Fatal(err)
				}
				index := filepath.Join(dir, "pkg.tar.zst"+artifact.PartsIndexSuffix)
				writeIndex(t, index, &artifact.Parts{MediaType: artifact.MediaTypeParts, Package: "pkg.tar.zst", Root: pkg.Root.Digest, Size: size, PartSize: size,
					Parts: []artifact.Part{{Name: "pkg.tar.zst.part001", Size: size, Digest: digest.FromString("not its digest")}}})
				refusedBySize(t, ctx, index, part, tc.what)
			})
		}
	}
}

// refusedBySize opens, verifies and splits the package at index, which
// must each be refused in well under a second with a PartError naming
// part and saying what.
func refusedBySize(t *testing.T, ctx context.Context, index, part, what string) {
	t.Helper()
	start := time.Now()
	_, openErr := artifact.Open(ctx, index)
	_, splitErr := artifact.Split(ctx, index, artifact.SplitOptions{PartSize: 4 << 20, Base: filepath.Join(t.TempDir(), "again.tar.zst")})
	took := time.Since(start)
	for name, err := range map[string]error{"open": openErr, "split": splitErr} {
		var pe *artifact.PartError
		if !errors.As(err, &pe) || pe.Part != part || !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), what) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line naming %s, %q", name, err, filepath.Base(part), what)
		}
	}
	if took > time.Second {
		t.Errorf("refused in %s", took)
	}
	t.Logf("refused in %s: %v", took.Round(time.Microsecond), openErr)
}

// TestSplitDamagedSource: splitting again a split package with a damaged
// part is refused, naming the part, and writes nothing: the parts and
// index are as they were, no temporary file is left.
func TestSplitDamagedSource(t *testing.T) {
	ctx := context.Background()
	res, ps := splitPackage(t, ".tar.zst", 2)
	dir := filepath.Dir(res.Path)
	os.Remove(res.Path)
	damaged := filepath.Join(dir, ps.Parts[2].Name)
	data, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(damaged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string][]byte {
		out := map[string][]byte{}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = b
		}
		return out
	}
	before := snapshot()
	for _, partSize := range []int64{1 << 20, 4 << 20} {
		_, err := artifact.Split(ctx, res.Path, artifact.SplitOptions{PartSize: partSize})
		var pe *artifact.PartError
		if !errors.As(err, &pe) || pe.Part != damaged || !strings.Contains(err.Error(), "is damaged") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("split into %d-byte parts: %v; want %s named as damaged", partSize, err, filepath.Base(damaged))
		}
		after := snapshot()
		if len(after) != len(before) {
			t.Fatalf("files %d before, %d after the refused split", len(before), len(after))
		}
		for name, b := range before {
			if !bytes.Equal(after[name], b) {
				t.Fatalf("%s changed by a refused split", name)
			}
		}
	}
}
