package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// writeLayoutImage writes a one-layer linux image (a tar of one file of
// random bytes: an image create can make the SBOM of) into the OCI layout
// dir, tagged tag, and returns its manifest.
func writeLayoutImage(t *testing.T, dir, tag string) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	store, err := oci.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<10)
	_, _ = rand.Read(data)
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	_ = tw.WriteHeader(&tar.Header{Name: "data.bin", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer := tarBuf.Bytes()
	ld := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayer, layer)
	cfg, _ := json.Marshal(ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}, RootFS: ocispec.RootFS{Type: "layers", DiffIDs: nil}})
	cd := content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, cfg)
	for _, b := range []struct {
		d    ocispec.Descriptor
		data []byte
	}{{ld, layer}, {cd, cfg}} {
		if err := store.Push(ctx, b.d, strings.NewReader(string(b.data))); err != nil {
			t.Fatal(err)
		}
	}
	m, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{ConfigDescriptor: &cd, Layers: []ocispec.Descriptor{ld}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, m, tag); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCLIMirror: `package mirror` pushes a signed package's images to an
// external registry under a prefix, by the recorded digests, after the
// signature check; with a wrong key nothing is pushed.
func TestCLIMirror(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: mir, version: 0.1.0}\nplatforms: [linux/"+runtime.GOARCH+"]\ncomponents:\n  - name: c\n    images:\n      - {ref: docker.io/library/app:1.0, layout: images}\n")
	img := writeLayoutImage(t, filepath.Join(dir, "images"), "1.0")
	pw := []string{passwordEnv + "=pw"}
	for _, args := range [][]string{{"key", "generate"}, {"key", "generate", "--prefix", "other"}, {"package", "create", "-f", "mir.tar.zst", "--sign-key", "cosign.key"}} {
		if _, stderr, code := runFerryEnv(t, dir, pw, args...); code != 0 {
			t.Fatalf("ferry %v: %s", args, stderr)
		}
	}
	host := registrytest.New(t)
	target := host + "/mirror/"
	resolve := func(ref string) (ocispec.Descriptor, error) {
		repo, err := remote.NewRepository(ref)
		if err != nil {
			t.Fatal(err)
		}
		repo.PlainHTTP = true
		return repo.Resolve(context.Background(), ref[strings.LastIndex(ref, ":")+1:])
	}

	out, stderr, code := runFerry(t, dir, "package", "mirror", "mir.tar.zst", target, "--key", "other.pub")
	if code != 1 || !strings.Contains(stderr, "other.pub") || strings.Count(stderr, "\n") != 1 || out != "" {
		t.Fatalf("mirror with a wrong key: exit %d, %q %q", code, out, stderr)
	}
	if _, err := resolve(host + "/mirror/library/app:1.0"); err == nil {
		t.Fatal("a refused mirror pushed the image")
	}

	out, stderr, code = runFerry(t, dir, "package", "mirror", "mir.tar.zst", target, "--key", "cosign.pub", "-o", "json")
	if code != 0 {
		t.Fatalf("mirror: exit %d: %s", code, stderr)
	}
	var res artifact.MirrorResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Images) != 1 || res.BytesPushed == 0 {
		t.Fatalf("mirror printed %s (%v)", out, err)
	}
	got, err := resolve(host + "/mirror/library/app:1.0")
	if err != nil || got.Digest != img.Digest || res.Images[0].Digest != img.Digest.String() {
		t.Fatalf("mirrored image: %v %v, want %s", got.Digest, err, img.Digest)
	}
	if root, err := resolve(host + "/mirror/mir:0.1.0"); err != nil || root.Digest.String() != res.Root {
		t.Fatalf("mirrored package: %v %v, want %s", root.Digest, err, res.Root)
	}
}
