package registry_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/registry"
)

// pushImage pushes a one-layer image of a random 1 MiB layer, tagged.
func pushImage(t *testing.T, base, repo, tag string) (manifest, layer ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	r := mustRepo(t, base, repo)
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	layer = content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayer, data)
	if err := pushBlob(ctx, r, data); err != nil {
		t.Fatal(err)
	}
	manifest, err := oras.PackManifest(ctx, r, oras.PackManifestVersion1_1, "application/vnd.example", oras.PackManifestOptions{Layers: []ocispec.Descriptor{layer}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Tag(ctx, manifest, tag); err != nil {
		t.Fatal(err)
	}
	return manifest, layer
}

// GarbageCollect frees the blobs of a deleted manifest, keeps those of
// the others and untagged referrers, and the registry serves what is left.
func TestGarbageCollect(t *testing.T) {
	root := t.TempDir()
	start := func() (string, func()) { return startAt(t, root) }
	base, stop := start()
	gone, goneLayer := pushImage(t, base, "app", "1")
	kept, keptLayer := pushImage(t, base, "app", "2")
	ref, _ := pushReferrer(t, base, "app", kept, "application/vnd.example.sig")
	ctx := context.Background()
	if err := mustRepo(t, base, "app").Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	stop()

	res, err := registry.GarbageCollect(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("storage %d → %d bytes", res.Before, res.After)
	if freed := res.Before - res.After; freed < 1<<20 || freed > 1<<20+64<<10 {
		t.Fatalf("freed %d bytes, want the 1 MiB layer and a little", freed)
	}

	base, stop = start()
	defer stop()
	r := mustRepo(t, base, "app")
	for _, d := range []ocispec.Descriptor{kept, keptLayer, ref} {
		if ok, err := r.Exists(ctx, d); err != nil || !ok {
			t.Errorf("%s after gc: %v %v", d.Digest, ok, err)
		}
	}
	if _, err := content.FetchAll(ctx, r.Blobs(), keptLayer); err != nil {
		t.Errorf("kept layer: %v", err)
	}
	if _, err := r.Blobs().Fetch(ctx, goneLayer); !errors.Is(err, errdef.ErrNotFound) {
		t.Errorf("deleted image's layer after gc: %v", err)
	}

	if _, err := registry.GarbageCollect(ctx, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no registry storage") {
		t.Errorf("gc of an empty folder: %v", err)
	}
}
