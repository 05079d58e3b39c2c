// Package imagetest writes the image the sbomgen tests describe: what an
// SBOM tool finds in it is known (dpkg packages, the OS, a Go module).
package imagetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DpkgPackages are the packages the image's dpkg status file lists.
var DpkgPackages = []struct{ Name, Version string }{{"libferry1", "1.2.3-1"}, {"ferry-tools", "0.9.0-2"}}

// GoModule is the module path of the Go program in the image.
const GoModule = "example.com/ferry-sbom-fixture"

// OSPurl is the purl the first dpkg package gets: the OS of the image's
// os-release names its distro.
const OSPurl = "pkg:deb/debian/libferry1@1.2.3-1?arch=amd64&distro=debian-12"

const osRelease = `PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
`

// Layout writes, into a new OCI layout in a temporary folder, a
// linux/amd64 image whose one layer holds a dpkg status file listing
// DpkgPackages, a Debian /etc/os-release and a static Go program (module
// GoModule) built with the go command on PATH; it returns the folder and
// the manifest's digest (the layout's index lists it) and the digest of an
// index of it (listed too).
func Layout(t testing.TB) (dir string, manifest, index v1.Hash) {
	t.Helper()
	var status bytes.Buffer
	for i, p := range DpkgPackages {
		if i > 0 {
			status.WriteString("\n")
		}
		fmt.Fprintf(&status, "Package: %s\nStatus: install ok installed\nPriority: optional\nSection: misc\nInstalled-Size: 64\n"+
			"Maintainer: Ferry Tests <tests@ferry.dev>\nArchitecture: amd64\nVersion: %s\nDescription: a test package\n a package of the SBOM fixture.\n",
			p.Name, p.Version)
	}
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, d := range []string{"etc/", "usr/", "usr/local/", "usr/local/bin/", "var/", "var/lib/", "var/lib/dpkg/"} {
		_ = tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: time.Unix(0, 0), Typeflag: tar.TypeDir})
	}
	for _, f := range []struct {
		name string
		data []byte
		mode int64
	}{
		{"etc/os-release", []byte(osRelease), 0o644},
		{"usr/local/bin/hello", goBinary(t), 0o755},
		{"var/lib/dpkg/status", status.Bytes(), 0o644},
	} {
		_ = tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg})
		_, _ = tw.Write(f.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBuf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}})
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	dir = t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	if manifest, err = img.Digest(); err != nil {
		t.Fatal(err)
	}
	if index, err = idx.Digest(); err != nil {
		t.Fatal(err)
	}
	return dir, manifest, index
}

// goBinary builds a tiny static Go program for linux/amd64.
func goBinary(t testing.TB) []byte {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module "+GoModule+"\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(src, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-buildvcs=false", "GOWORK=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
