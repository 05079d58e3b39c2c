// Package bomscantest makes packages that carry real SBOMs (the
// ferry-sbom helper, Syft) for the tests of SBOM search and audit.
package bomscantest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// The images Package puts in a package: App for linux/amd64 and
// linux/arm64 (an index), One for linux/amd64 alone. Each holds the SBOM
// fixture (fixture.SBOMImage): the dpkg packages fixture.DpkgPackages and a
// Go program of module fixture.GoModule.
const (
	App = "example.com/org/app:1.0"
	One = "example.com/org/one:1.0"
)

var goBinary struct {
	once sync.Once
	data []byte
	err  error
}

// Binary is a static Go program for linux/amd64 with build information
// (module fixture.GoModule), built once per test binary.
func Binary(t testing.TB) []byte {
	t.Helper()
	goBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-gobin-")
		if err != nil {
			goBinary.err = err
			return
		}
		defer os.RemoveAll(dir)
		goBinary.data, goBinary.err = fixture.GoBinary(context.Background(), dir, "amd64")
	})
	if goBinary.err != nil {
		t.Fatal(goBinary.err)
	}
	return goBinary.data
}

// Image is an image of Package: its reference and the files of its one
// layer's Go program (nil: Binary's).
type Image struct {
	Ref       string
	Platforms []string
	Program   []byte
}

// Package creates, in a temporary folder, the package name-version
// holding images (App and One when none are given), each platform with its
// SBOM made by the real helper, and returns the archive's path.
func Package(t testing.TB, name, version string, images ...Image) string {
	t.Helper()
	ctx := context.Background()
	if len(images) == 0 {
		images = []Image{{Ref: App, Platforms: []string{"linux/amd64", "linux/arm64"}}, {Ref: One, Platforms: []string{"linux/amd64"}}}
	}
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: %s}\nplatforms: [linux/amd64, linux/arm64]\ncomponents:\n  - name: base\n    images:\n", name, version)
	for i, img := range images {
		prog := img.Program
		if prog == nil {
			prog = Binary(t)
		}
		var ms []ocispec.Descriptor
		for _, p := range img.Platforms {
			pl, err := definition.ParsePlatform(p)
			if err != nil {
				t.Fatal(err)
			}
			fp := fixture.Platform(pl.OS, pl.Architecture, pl.Variant)
			m, err := fixture.SBOMImage(ctx, store, fp, prog)
			if err != nil {
				t.Fatal(err)
			}
			m.Platform = &fp
			ms = append(ms, m)
		}
		root := ms[0]
		if len(ms) > 1 {
			if root, err = fixture.PushIndex(ctx, store, ms); err != nil {
				t.Fatal(err)
			}
		}
		tag := fmt.Sprintf("img%d", i)
		if err := store.Tag(ctx, root, tag); err != nil {
			t.Fatal(err)
		}
		yaml += fmt.Sprintf("      - {ref: %s, layout: images, tag: %s}\n", img.Ref, tag)
	}
	if err := os.WriteFile(filepath.Join(dir, definition.FileName), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := sbomexectest.Generator()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), name+"-"+version+".tar.zst")
	if _, err := build.Create(ctx, def, build.CreateOptions{Output: out, SBOM: gen}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return out
}

// GoProgram builds a static Go program for linux/amd64 that imports
// module at version (it must be in the module cache or the proxy), so
// that its build information, and so its SBOM, names module@version.
func GoProgram(t testing.TB, module, pkg, version string) []byte {
	t.Helper()
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/ferry-audit-fixture\n\ngo 1.22\n\nrequire "+module+" "+version+"\n")
	write("main.go", "package main\n\nimport _ \""+pkg+"\"\n\nfunc main() {}\n")
	out := filepath.Join(dir, "prog")
	run := func(args ...string) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, msg)
		}
	}
	run("mod", "tidy")
	run("build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, ".")
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Cleanup removes the helper sbomexectest built; call it from TestMain.
func Cleanup() { sbomexectest.Cleanup() }
