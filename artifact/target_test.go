package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestCopyBetweenTargets: a signed package copied from its archive, its
// .tar and its layout folder (each a read-only oras target) into an OCI
// layout store and into memory, then from there into a registry, keeps its
// root, its signature (tag) and its bytes: the registry copy pulls back
// byte for byte and verifies with the key.
func TestCopyBetweenTargets(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	dir := t.TempDir()
	priv, pub := keyPair(t, dir, "copy")
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(dir, "p.tar.zst"), SignKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "p.tar")
	if _, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: tarPath, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	sigTag := artifact.SignatureTag(res.Root.Digest)
	for i, src := range []string{res.Path, tarPath, extractLayout(t, res.Path)} {
		r := openPkg(t, src)
		store, err := oci.New(filepath.Join(t.TempDir(), "layout"))
		if err != nil {
			t.Fatal(err)
		}
		mem := memory.New()
		if _, err := artifact.Copy(ctx, r, "", store, "1.0.0", artifact.CopyOptions{}); err != nil {
			t.Fatalf("%s → OCI layout: %v", src, err)
		}
		if _, err := artifact.Copy(ctx, r, "", mem, "1.0.0", artifact.CopyOptions{}); err != nil {
			t.Fatalf("%s → memory: %v", src, err)
		}
		for name, got := range map[string]interface {
			Resolve(context.Context, string) (ocispec.Descriptor, error)
		}{"layout": store, "memory": mem} {
			if d, err := got.Resolve(ctx, "1.0.0"); err != nil || d.Digest != res.Root.Digest {
				t.Fatalf("%s → %s: root %v, %v", src, name, d.Digest, err)
			}
			if _, err := got.Resolve(ctx, sigTag); err != nil {
				t.Fatalf("%s → %s: signature tag: %v", src, name, err)
			}
		}
		// From the layout store to a registry, then back into an archive.
		ref := w.Host + "/copy/p" + string(rune('a'+i)) + ":1.0.0"
		repo := remoteRepo(t, ref)
		if _, err := artifact.Copy(ctx, store, "1.0.0", repo, "1.0.0", artifact.CopyOptions{}); err != nil {
			t.Fatalf("OCI layout → registry: %v", err)
		}
		if _, err := verifyRemote(ctx, ref, artifact.VerifyOptions{Keys: []artifact.Verifier{pub}}); err != nil {
			t.Fatalf("%s through a layout store: %v", src, err)
		}
		// The archive it came from (the layout folder: the .tar.zst), in
		// its format: the same bytes.
		orig := src
		if i == 2 {
			orig = res.Path
		}
		want, _ := os.ReadFile(orig)
		out := filepath.Join(t.TempDir(), "pulled"+artifact.FormatFromPath(orig).Ext())
		if _, err := pullRemote(ctx, ref, out, artifact.PullOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
			t.Fatalf("%s → layout → registry → archive: %d bytes, want the original %d", src, len(got), len(want))
		}
	}

	// A package is a source for Pull too: its layout folder written as a
	// .tar.zst is the archive it came from, byte for byte.
	out := filepath.Join(t.TempDir(), "from-layout.tar.zst")
	if _, err := artifact.Pull(ctx, openPkg(t, extractLayout(t, res.Path)), "", out, artifact.PullOptions{Keys: []artifact.Verifier{pub}}); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, out), readFile(t, res.Path); !bytes.Equal(got, want) {
		t.Fatalf("layout folder → archive: %d bytes, want %d", len(got), len(want))
	}

	// A package to a registry is the streaming push: again, nothing moves.
	r := openPkg(t, res.Path)
	ref := w.Host + "/copy/direct:1.0.0"
	if _, err := artifact.Copy(ctx, r, "", remoteRepo(t, ref), "1.0.0", artifact.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyRemote(ctx, ref, artifact.VerifyOptions{Keys: []artifact.Verifier{pub}}); err != nil {
		t.Fatal(err)
	}
}

// TestReaderFetchVerifies: Fetch from a package yields a blob's bytes only
// when they match its digest; an unknown blob is errdef.ErrNotFound.
func TestReaderFetchVerifies(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	res := create(t, w, filepath.Join(t.TempDir(), "p.tar"))
	a := loadArchive(t, res.Path)
	layer := a.manifest(t, a.kind(t, artifact.KindChart).Digest).Layers[0]
	for name, path := range map[string]string{"archive": res.Path, "layout": extractLayout(t, res.Path)} {
		rc, err := openPkg(t, path).Fetch(ctx, layer)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || digest.FromBytes(got) != layer.Digest {
			t.Fatalf("%s: fetched %d bytes, %v", name, len(got), err)
		}
		missing := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromString("nothing"), Size: 7}
		if _, err := openPkg(t, path).Fetch(ctx, missing); !errors.Is(err, errdef.ErrNotFound) {
			t.Fatalf("%s: fetch of an unknown blob: %v", name, err)
		}
	}
	bad := a.write(t, flip(layer.Digest))
	for name, path := range map[string]string{"archive": bad, "layout": extractLayout(t, bad)} {
		rc, err := openPkg(t, path).Fetch(ctx, layer)
		if err == nil {
			_, err = io.ReadAll(rc)
			rc.Close()
		}
		if err == nil {
			t.Fatalf("%s: a damaged blob was fetched whole", name)
		}
	}
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
