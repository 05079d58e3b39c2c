package backup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestRestoreLanesAndLevels restores, into a registry on filesystem
// storage, a backup whose blobs go up in both lanes (layers of 2 and 3 MiB,
// configs and layers of a few KiB) and whose manifests go up in three
// levels: two image manifests, the index naming them, and a referrer whose
// subject is the index. Every tag, blob and referrer comes back.
func TestRestoreLanesAndLevels(t *testing.T) {
	ctx := context.Background()
	src := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	amd := pushImage(t, src, "multi", "amd64", randomBlob(t, 2<<20), randomBlob(t, 4<<10))
	arm := pushImage(t, src, "multi", "arm64", randomBlob(t, 3<<20), randomBlob(t, 8<<10))
	repo, err := registryAt(t, src).Repository(ctx, "multi")
	if err != nil {
		t.Fatal(err)
	}
	push := func(mt string, data []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if err := repo.Push(ctx, d, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	amd.Platform, arm.Platform = &ocispec.Platform{OS: "linux", Architecture: "amd64"}, &ocispec.Platform{OS: "linux", Architecture: "arm64"}
	idxData, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{amd, arm}})
	idx := push(ocispec.MediaTypeImageIndex, idxData)
	if err := repo.Tag(ctx, idx, "1.0"); err != nil {
		t.Fatal(err)
	}
	sigData, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		ArtifactType: "application/vnd.example.signature", Config: push(ocispec.MediaTypeEmptyJSON, []byte("{}")),
		Layers: []ocispec.Descriptor{push("application/octet-stream", randomBlob(t, 512))}, Subject: &idx})
	sig := push(ocispec.MediaTypeImageManifest, sigData)

	file := filepath.Join(t.TempDir(), "b.tar")
	if _, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(file), backup.Options{}); err != nil {
		t.Fatal(err)
	}
	dst := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	rr, err := backup.Restore(ctx, backup.Target{Registry: registryAt(t, dst)}, []string{file}, backup.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameContent(t, dst, src)
	dr, err := registryAt(t, dst).Repository(ctx, "multi")
	if err != nil {
		t.Fatal(err)
	}
	var refs []ocispec.Descriptor
	if err := dr.(interface {
		Referrers(context.Context, ocispec.Descriptor, string, func([]ocispec.Descriptor) error) error
	}).Referrers(ctx, idx, "", func(p []ocispec.Descriptor) error { refs = append(refs, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].Digest != sig.Digest {
		t.Fatalf("referrers of the index after the restore: %v, want %s", refs, sig.Digest)
	}
	t.Logf("restore: %d pushed (%d bytes), %d mounted", rr.Pushed, rr.PushedSize, rr.Mounted)
}
