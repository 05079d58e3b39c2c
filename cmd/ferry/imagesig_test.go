package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// TestCLIInspectImageSignatures: an image whose layout holds a cosign
// .sig tag and a signature referrer is created with both; inspect lists
// each (kind, subject, tag or referrer) in text and in JSON.
func TestCLIInspectImageSignatures(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := fixture.PushImage(ctx, store, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.NewLayer(fixture.Rand(7), 1024)})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, img, "one"); err != nil {
		t.Fatal(err)
	}
	// Evidence as cosign lays it out: a .sig tag, and a referrer.
	payload, err := oras.PushBytes(ctx, store, "application/vnd.dev.cosign.simplesigning.v1+json", []byte(`{"critical":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	sig, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, "application/vnd.oci.image.config.v1+json", oras.PackManifestOptions{Layers: []ocispec.Descriptor{payload}})
	if err != nil {
		t.Fatal(err)
	}
	tag := artifact.CosignTag(img.Digest, ".sig")
	if err := store.Tag(ctx, sig, tag); err != nil {
		t.Fatal(err)
	}
	subject := img
	referrer, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, artifact.ArtifactTypeCosignSignature, oras.PackManifestOptions{Layers: []ocispec.Descriptor{payload}, Subject: &subject})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, referrer, "referrer"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: s, version: 0.1.0}\n"+
		"platforms: [linux/amd64]\ncomponents:\n  - name: c\n    images:\n      - {ref: example.com/org/one:1.0, layout: images, tag: one}\n")
	if _, stderr, code := runFerry(t, dir, "package", "create", "--sbom=false"); code != 0 {
		t.Fatal(stderr)
	}
	pkg := "s-0.1.0.tar.zst"
	out, stderr, code := runFerry(t, dir, "package", "inspect", pkg)
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{
		"signature of " + img.Digest.String(),
		"tag " + tag,
		"referrer " + artifact.ArtifactTypeCosignSignature,
		sig.Digest.String(), referrer.Digest.String(),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect does not show %q:\n%s", want, out)
		}
	}
	// The signature rows (two digests and a tag each) do not widen the
	// image's row: its reference and digest stay close.
	if gap := regexp.MustCompile(`one:1\.0( +)→`).FindStringSubmatch(out); gap == nil || len(gap[1]) > 8 {
		t.Errorf("the image row is widened by its signature rows:\n%s", out)
	}
	out, _, _ = runFerry(t, dir, "package", "inspect", pkg, "-o", "json")
	var rep struct {
		Components []struct {
			Images []struct {
				Signatures []artifact.ImageSignature
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Components) != 1 || len(rep.Components[0].Images) != 1 {
		t.Fatalf("inspect -o json: %v\n%s", err, out)
	}
	got := map[string]artifact.ImageSignature{}
	for _, s := range rep.Components[0].Images[0].Signatures {
		got[s.Digest.String()] = s
	}
	if s := got[sig.Digest.String()]; s.Kind != "signature" || s.Tag != tag || s.Subject != img.Digest {
		t.Errorf("inspect -o json, the .sig: %+v", s)
	}
	if s := got[referrer.Digest.String()]; s.Kind != "signature" || s.ArtifactType != artifact.ArtifactTypeCosignSignature || s.Subject != img.Digest || s.Tag != "" {
		t.Errorf("inspect -o json, the referrer: %+v", s)
	}
}
