package inject

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestBuildImage: one binary gives one reproducible single-layer image
// whose layout makes a valid injector payload.
func TestBuildImage(t *testing.T) {
	ctx := context.Background()
	bin := []byte("\x7fELF not really a binary, but bytes all the same")
	a, b := t.TempDir(), t.TempDir()
	da, err := BuildImage(ctx, a, ImageOptions{Arch: "amd64", Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	db, err := BuildImage(ctx, b, ImageOptions{Arch: "amd64", Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if da.Digest != db.Digest {
		t.Fatalf("two builds differ: %s, %s", da.Digest, db.Digest)
	}
	if other, _ := BuildImage(ctx, t.TempDir(), ImageOptions{Arch: "arm64", Binary: bin}); other.Digest == da.Digest {
		t.Fatal("amd64 and arm64 images share a digest")
	}
	var m ocispec.Manifest
	data, err := os.ReadFile(filepath.Join(a, "blobs", "sha256", da.Digest.Encoded()))
	if err != nil || json.Unmarshal(data, &m) != nil || len(m.Layers) != 1 || m.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip {
		t.Fatalf("manifest %s: %v", data, err)
	}
	var cfg ocispec.Image
	data, _ = os.ReadFile(filepath.Join(a, "blobs", "sha256", m.Config.Digest.Encoded()))
	if err := json.Unmarshal(data, &cfg); err != nil || cfg.Architecture != "amd64" || cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != cluster.RegistryBinaryPath {
		t.Fatalf("config %s: %v", data, err)
	}
	p1, err := NewPayload(os.DirFS(a))
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := NewPayload(os.DirFS(b))
	if p1.Digest != p2.Digest {
		t.Fatal("payloads of the same image differ")
	}
	if _, err := BuildImage(ctx, t.TempDir(), ImageOptions{Arch: "s390x", Binary: bin}); err == nil {
		t.Fatal("an unsupported architecture was accepted")
	}
}

// TestPushImageUncompressed: an uncompressed layer is the tar itself (its
// digest is its diff ID), the same from a file as from memory, and a second
// push sends nothing.
func TestPushImageUncompressed(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{Store: memory.New()}
	bin := bytes.Repeat([]byte("ferry"), 1000)
	file := filepath.Join(t.TempDir(), "ferry")
	if err := os.WriteFile(file, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	desc, err := PushImage(ctx, store, ImageOptions{Arch: "amd64", BinaryFile: file, Path: "/ferry", Uncompressed: true})
	if err != nil {
		t.Fatal(err)
	}
	if store.pushes != 3 {
		t.Fatalf("%d pushes, want 3", store.pushes)
	}
	m := fetchJSON[ocispec.Manifest](t, store, desc)
	cfg := fetchJSON[ocispec.Image](t, store, m.Config)
	if m.Layers[0].MediaType != ocispec.MediaTypeImageLayer || m.Layers[0].Digest != cfg.RootFS.DiffIDs[0] || cfg.Config.Entrypoint[0] != "/ferry" {
		t.Fatalf("layer %+v, config %+v", m.Layers[0], cfg)
	}
	again, err := PushImage(ctx, store, ImageOptions{Arch: "amd64", Binary: bin, Path: "/ferry", Uncompressed: true})
	if err != nil || again.Digest != desc.Digest || store.pushes != 3 {
		t.Fatalf("second push, from memory: %s (%v), %d pushes", again.Digest, err, store.pushes)
	}
}

// TestTarLayer: the layer written from its parts is what archive/tar writes.
func TestTarLayer(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 5000} {
		bin := bytes.Repeat([]byte{7}, n)
		var want bytes.Buffer
		tw := tar.NewWriter(&want)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "ferry", Mode: 0o555, Size: int64(n), ModTime: time.Unix(0, 0), Format: tar.FormatPAX})
		tw.Write(bin)
		tw.Close()
		l, err := newTarLayer(ImageOptions{Binary: bin, Path: "/ferry"})
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := l.writeTo(&got); err != nil {
			t.Fatal(err)
		}
		d, size, _ := l.digest()
		if !bytes.Equal(got.Bytes(), want.Bytes()) || d != digest.FromBytes(want.Bytes()) || size != int64(want.Len()) {
			t.Fatalf("%d bytes: the tar stream differs from archive/tar's (%d, %d bytes)", n, got.Len(), want.Len())
		}
	}
}

type countingStore struct {
	*memory.Store
	pushes int
}

func (s *countingStore) Push(ctx context.Context, d ocispec.Descriptor, r io.Reader) error {
	s.pushes++
	return s.Store.Push(ctx, d, r)
}

func fetchJSON[T any](t *testing.T, s *countingStore, d ocispec.Descriptor) T {
	t.Helper()
	var v T
	rc, err := s.Fetch(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if digest.FromBytes(b) != d.Digest {
		t.Fatal("content does not match its digest")
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBuildImageCache: the compressed layer is kept in the cache and used
// again (same digest); a damaged or planted file is not trusted but
// replaced.
func TestBuildImageCache(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	t.Setenv("FERRY_CACHE_DIR", cache)
	bin := bytes.Repeat([]byte("\x7fELF cached "), 4096)
	first, err := BuildImage(ctx, t.TempDir(), ImageOptions{Arch: "amd64", Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "layers", "*.tar.gz"))
	if len(files) != 1 {
		t.Fatalf("cache holds %q, want one layer", files)
	}
	kept, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	again, err := BuildImage(ctx, t.TempDir(), ImageOptions{Arch: "amd64", Binary: bin})
	if err != nil || again.Digest != first.Digest {
		t.Fatalf("from the cache: %s, %v; want %s", again.Digest, err, first.Digest)
	}
	// A planted layer: a valid gzip of other bytes under the same name.
	var other bytes.Buffer
	zw := gzip.NewWriter(&other)
	zw.Write([]byte("something else entirely"))
	zw.Close()
	oversized := append(bytes.Clone(kept), make([]byte, 1<<20)...)
	for what, data := range map[string][]byte{"damaged": kept[:len(kept)/2], "planted": other.Bytes(), "oversized": oversized} {
		if err := os.WriteFile(files[0], data, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := BuildImage(ctx, t.TempDir(), ImageOptions{Arch: "amd64", Binary: bin})
		if err != nil || d.Digest != first.Digest {
			t.Fatalf("%s cache file: %s, %v; want %s", what, d.Digest, err, first.Digest)
		}
		if got, _ := os.ReadFile(files[0]); !bytes.Equal(got, kept) {
			t.Fatalf("%s cache file not replaced", what)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "layers", "*")); len(left) != 1 {
		t.Fatalf("cache holds %q: temporaries left", left)
	}
}
