package inject

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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
	if err := json.Unmarshal(data, &cfg); err != nil || cfg.Architecture != "amd64" || cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != RegistryBinaryPath {
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
