package mkimg_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

var binary = []byte("#!/not/really/a/static/binary\n")

func TestReproducible(t *testing.T) {
	opts := mkimg.Options{Cmd: []string{"serve"}, Labels: map[string]string{"a": "1", "b": "2"}}
	a, err := mkimg.New(binary, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mkimg.New(binary, opts)
	if err != nil {
		t.Fatal(err)
	}
	if a.Manifest.Digest != b.Manifest.Digest {
		t.Errorf("same inputs, manifests %s and %s", a.Manifest.Digest, b.Manifest.Digest)
	}
	var ta, tb bytes.Buffer
	if err := a.WriteArchive(&ta, "ferry.local/tiny:e2e"); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteArchive(&tb, "ferry.local/tiny:e2e"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta.Bytes(), tb.Bytes()) {
		t.Error("same inputs, different archives")
	}

	c, err := mkimg.New(binary, mkimg.Options{Cmd: []string{"serve"}, Labels: map[string]string{"a": "other"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Digest == a.Manifest.Digest || c.Config.Digest == a.Config.Digest {
		t.Error("another label, same manifest or config digest")
	}
	if c.Layer.Digest != a.Layer.Digest {
		t.Errorf("another label changed the layer: %s, %s", a.Layer.Digest, c.Layer.Digest)
	}

	u, err := mkimg.New(binary, mkimg.Options{Cmd: []string{"serve"}, Labels: map[string]string{"a": "1", "b": "2"}, User: "65534:65534"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(fetch(t, u, u.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65534:65534" || u.Config.Digest == a.Config.Digest || u.Layer.Digest != a.Layer.Digest {
		t.Errorf("with a user: config user %q, config %s (without %s), layer %s (without %s)", cfg.Config.User, u.Config.Digest, a.Config.Digest, u.Layer.Digest, a.Layer.Digest)
	}
}

func TestImage(t *testing.T) {
	ctx := context.Background()
	img, err := mkimg.New(binary, mkimg.Options{Cmd: []string{"pause"}, Architecture: "arm64", User: "65532"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(fetch(t, img, img.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "arm64" || cfg.Config.User != "65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/tiny" ||
		len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "pause" || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != img.Layer.Digest {
		t.Errorf("config %+v", cfg)
	}
	tr := tar.NewReader(bytes.NewReader(fetch(t, img, img.Layer)))
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(tr)
	if hdr.Name != "tiny" || hdr.Mode != 0o755 || !bytes.Equal(got, binary) {
		t.Errorf("layer holds %s mode %o (%d bytes)", hdr.Name, hdr.Mode, len(got))
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("layer: more than one entry (%v)", err)
	}

	_, err = img.Fetch(ctx, ocispec.Descriptor{Digest: digest.FromString("absent")})
	if !errors.Is(err, errdef.ErrNotFound) {
		t.Errorf("fetch of an unknown blob: %v, want ErrNotFound", err)
	}
	if _, err := mkimg.New(binary, mkimg.Options{Path: "bin/tiny"}); err == nil {
		t.Error("a path with a folder: no error")
	}
}

// TestArchive reads the archive back as an OCI layout and checks it holds the
// image under its tag and names it for containerd's importer.
func TestArchive(t *testing.T) {
	ctx := context.Background()
	img, err := mkimg.New(binary, mkimg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny.tar")
	var buf bytes.Buffer
	if err := img.WriteArchive(&buf, "ferry.local/tiny:e2e"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := oci.NewFromTar(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := store.Resolve(ctx, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != img.Manifest.Digest {
		t.Errorf("archive resolves e2e to %s, want %s", desc.Digest, img.Manifest.Digest)
	}
	if name := desc.Annotations[mkimg.AnnotationImageName]; name != "ferry.local/tiny:e2e" {
		t.Errorf("%s = %q", mkimg.AnnotationImageName, name)
	}
	// Every blob is there and matches its digest.
	if err := oras.CopyGraph(ctx, store, memory.New(), desc, oras.DefaultCopyGraphOptions); err != nil {
		t.Errorf("walking the archive's graph: %v", err)
	}

	for _, name := range []string{"ferry.local/tiny", "ferry.local/Tiny:x", "ferry.local/tiny@sha256:" + img.Manifest.Digest.Encoded()} {
		if err := img.WriteArchive(io.Discard, name); err == nil {
			t.Errorf("name %q: no error", name)
		}
	}
}

func TestPush(t *testing.T) {
	ctx := context.Background()
	img, err := mkimg.New(binary, mkimg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := remote.NewRepository(registrytest.New(t) + "/e2e/tiny")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	if err := oras.CopyGraph(ctx, img, repo, img.Manifest, oras.DefaultCopyGraphOptions); err != nil {
		t.Fatal(err)
	}
	desc, err := repo.Resolve(ctx, img.Manifest.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != img.Manifest.Digest || desc.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("registry has %s %s, want %s", desc.MediaType, desc.Digest, img.Manifest.Digest)
	}
}

func fetch(t *testing.T, s content.Fetcher, desc ocispec.Descriptor) []byte {
	t.Helper()
	b, err := content.FetchAll(context.Background(), s, desc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLinksAndFiles: the binary also appears at each link (a hard link, its
// folders made first), the files hold their bytes, and paths that collide
// are refused.
func TestLinksAndFiles(t *testing.T) {
	opts := mkimg.Options{Links: []string{"/bin/sh", "/usr/lib/app/run", "bin/bash"}, Files: map[string][]byte{"/standin.json": []byte("{}"), "etc/app/conf": []byte("x")}}
	img, err := mkimg.New(binary, opts)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(fetch(t, img, img.Layer)))
	var got []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		desc := fmt.Sprintf("%s %c %o %s %q", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Linkname, data)
		if hdr.Name == "tiny" {
			desc = fmt.Sprintf("tiny %c %o binary=%v", hdr.Typeflag, hdr.Mode, bytes.Equal(data, binary))
		}
		got = append(got, desc)
	}
	want := []string{
		"tiny 0 755 binary=true",
		`bin/ 5 755  ""`,
		`bin/bash 1 755 tiny ""`,
		`bin/sh 1 755 tiny ""`,
		`etc/ 5 755  ""`,
		`etc/app/ 5 755  ""`,
		`etc/app/conf 0 644  "x"`,
		`standin.json 0 644  "{}"`,
		`usr/ 5 755  ""`,
		`usr/lib/ 5 755  ""`,
		`usr/lib/app/ 5 755  ""`,
		`usr/lib/app/run 1 755 tiny ""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	again, err := mkimg.New(binary, opts)
	if err != nil || again.Layer.Digest != img.Layer.Digest {
		t.Errorf("same options, layers %s and %s (%v)", img.Layer.Digest, again.Layer.Digest, err)
	}

	for _, bad := range []mkimg.Options{
		{Links: []string{"/tiny"}},
		{Links: []string{"/bin/sh", "bin/sh"}},
		{Links: []string{"/tiny/x"}},
		{Links: []string{"/a/b"}, Files: map[string][]byte{"a": nil}},
		{Links: []string{"/"}},
	} {
		if _, err := mkimg.New(binary, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
