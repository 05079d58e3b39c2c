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
	"os/exec"
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

// TestProgramsAndSymlinks: executables are mode 0755, symbolic links keep
// their targets, the config carries the entrypoint, environment and
// working folder asked for, and a nil entrypoint is the binary's.
func TestProgramsAndSymlinks(t *testing.T) {
	opts := mkimg.Options{
		Executables: map[string][]byte{"/usr/local/bin/run.sh": []byte("#!/bin/sh\n")},
		Symlinks:    map[string]string{"/bin/sh": "dash", "usr/local/bin/tool": "/tiny"},
		Entrypoint:  []string{},
		Env:         []string{"PATH=/usr/local/bin:/bin"},
		WorkingDir:  "/home/app",
	}
	img, err := mkimg.New(binary, opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(bytes.NewReader(fetch(t, img, img.Layer)))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name != "tiny" {
			got = append(got, fmt.Sprintf("%s %c %o %s", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Linkname))
		}
	}
	want := []string{
		"bin/ 5 755 ",
		"bin/sh 2 777 dash",
		"usr/ 5 755 ",
		"usr/local/ 5 755 ",
		"usr/local/bin/ 5 755 ",
		"usr/local/bin/run.sh 0 755 ",
		"usr/local/bin/tool 2 777 /tiny",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(fetch(t, img, img.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Entrypoint) != 0 || len(cfg.Config.Env) != 1 || cfg.Config.Env[0] != opts.Env[0] || cfg.Config.WorkingDir != "/home/app" {
		t.Errorf("config %+v", cfg.Config)
	}
	for _, bad := range []mkimg.Options{
		{Symlinks: map[string]string{"/bin/sh": ""}},
		{Symlinks: map[string]string{"/bin": "usr/bin"}, Executables: map[string][]byte{"/bin/sh": nil}},
		{Symlinks: map[string]string{"/x": "y"}, Executables: map[string][]byte{"x": nil}},
	} {
		if _, err := mkimg.New(binary, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestHostFilesRun builds an image of this machine's dash with the
// libraries ldd names, and, as root, runs it in a chroot of the layer:
// nothing it needs is missing.
func TestHostFilesRun(t *testing.T) {
	dash, err := exec.LookPath("dash")
	if err != nil {
		t.Skip("no dash on this machine")
	}
	dash, err = filepath.EvalSymlinks(dash)
	if err != nil {
		t.Fatal(err)
	}
	files, err := mkimg.HostFiles(dash)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 { // dash, libc, the loader
		t.Fatalf("HostFiles(%s): %d files", dash, len(files))
	}
	if _, err := mkimg.HostFiles("bin/sh"); err == nil {
		t.Error("a relative path: no error")
	}
	img, err := mkimg.New(binary, mkimg.Options{Executables: files, Symlinks: map[string]string{"/bin/sh": dash}})
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	root := t.TempDir()
	extract(t, fetch(t, img, img.Layer), root)
	out, err := exec.Command("chroot", root, "/bin/sh", "-c", "echo ran").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ran" {
		t.Errorf("chroot /bin/sh: %v: %s", err, out)
	}
}

// extract writes a layer's folders, files and symbolic links under root.
func extract(t *testing.T, layer []byte, root string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(root, hdr.Linkname), p)
		default:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, os.FileMode(hdr.Mode))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
