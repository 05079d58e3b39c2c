package registry_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

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
// the others and untagged referrers, and the registry serves what is left:
// on the filesystem and on S3, with the registry running. During the
// collection the registry is read-only: pulls go on, pushes are refused.
func TestGarbageCollect(t *testing.T) {
	forEachStorage(t, func(t *testing.T, cfg registry.Config) {
		cfg.MaintenancePoll = 50 * time.Millisecond
		base, stop := startOn(t, cfg)
		defer stop()
		gone, goneLayer := pushImage(t, base, "app", "1")
		kept, keptLayer := pushImage(t, base, "app", "2")
		ref, _ := pushReferrer(t, base, "app", kept, "application/vnd.example.sig")
		ctx := context.Background()
		r := mustRepo(t, base, "app")
		if err := r.Delete(ctx, gone); err != nil {
			t.Fatal(err)
		}

		// A dry run says what the collection will free, and frees nothing.
		dry, err := registry.GarbageCollect(ctx, cfg, registry.GCOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if !dry.DryRun || dry.Blobs != 2 || dry.Freeable < 1<<20 || dry.After != dry.Before-dry.Freeable {
			t.Fatalf("dry run: %+v, want the deleted image's manifest and 1 MiB layer", dry)
		}
		if ok, err := r.Blobs().Exists(ctx, goneLayer); err != nil || !ok {
			t.Fatalf("a dry run deleted the layer: exists %v, %v", ok, err)
		}

		type result struct {
			res registry.GCResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := registry.GarbageCollect(ctx, cfg, registry.GCOptions{Settle: time.Second})
			done <- result{res, err}
		}()
		// Within the settle time every registry is read-only and still
		// serves pulls.
		time.Sleep(500 * time.Millisecond)
		if resp := do(t, http.MethodPost, base+"/v2/app/blobs/uploads/", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("push during gc: %s, want 405", resp.Status)
		}
		if _, err := content.FetchAll(ctx, r.Blobs(), keptLayer); err != nil {
			t.Errorf("pull during gc: %v", err)
		}
		got := <-done
		if got.err != nil {
			t.Fatal(got.err)
		}
		t.Logf("storage %d → %d bytes", got.res.Before, got.res.After)
		if freed := got.res.Before - got.res.After; freed < 1<<20 || freed > 1<<20+64<<10 {
			t.Fatalf("freed %d bytes, want the 1 MiB layer and a little", freed)
		} else if freed != dry.Freeable || got.res.Before != dry.Before {
			t.Errorf("freed %d bytes of %d, the dry run said %d of %d", freed, got.res.Before, dry.Freeable, dry.Before)
		}

		// The registry leaves read-only mode, without a restart.
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp := do(t, http.MethodPost, base+"/v2/app/blobs/uploads/", "", nil)
			if resp.StatusCode == http.StatusAccepted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("push after gc: %s", resp.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, d := range []ocispec.Descriptor{kept, keptLayer, ref} {
			if ok, err := r.Exists(ctx, d); err != nil || !ok {
				t.Errorf("%s after gc: %v %v", d.Digest, ok, err)
			}
		}
		if _, err := content.FetchAll(ctx, r.Blobs(), keptLayer); err != nil {
			t.Errorf("kept layer: %v", err)
		}
		if ok, err := r.Blobs().Exists(ctx, goneLayer); err != nil || ok {
			t.Errorf("deleted image's layer after gc: exists %v, %v", ok, err)
		}
		if _, err := r.Blobs().Fetch(ctx, goneLayer); !errors.Is(err, errdef.ErrNotFound) {
			t.Errorf("deleted image's layer after gc: %v", err)
		}
		// What was swept can be pushed again.
		pushImage(t, base, "app", "3")
	})

	if _, err := registry.GarbageCollect(context.Background(), registry.Config{RootDir: t.TempDir()}, registry.GCOptions{}); err == nil || !strings.Contains(err.Error(), "no registry storage") {
		t.Errorf("gc of an empty folder: %v", err)
	}
}
