package artifact_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// TestFuzzSeedArchive keeps testdata/archive/small.tar, the fuzz seed, a
// valid package: FERRY_UPDATE_TESTDATA=1 rewrites it.
func TestFuzzSeedArchive(t *testing.T) {
	seed := filepath.Join("testdata", "archive", "small.tar")
	if os.Getenv("FERRY_UPDATE_TESTDATA") == "1" {
		ctx := context.Background()
		dir := t.TempDir()
		store, err := oci.New(filepath.Join(dir, "images"))
		if err != nil {
			t.Fatal(err)
		}
		rng := fixture.Rand(7)
		img, err := fixture.PushImage(ctx, store, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.NewLayer(rng, 64)})
		if err != nil {
			t.Fatal(err)
		}
		store.Tag(ctx, img, "1")
		writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
		writeFile(t, filepath.Join(dir, "f.txt"), "hello\n")
		writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: small, version: '1'}\nplatforms: [linux/amd64]\ncomponents:\n  - name: c\n    images: [{ref: x/y:1, layout: images}]\n    manifests: [{name: m, files: [m.yaml]}]\n    files: [{source: f.txt, target: /f}]\n")
		def, err := definition.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(seed), 0o755)
		if _, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: seed}); err != nil {
			t.Fatal(err)
		}
	}
	if err := inspectErr(seed); err != nil {
		t.Fatalf("fuzz seed is not a valid package (FERRY_UPDATE_TESTDATA=1 rewrites it): %v", err)
	}
}
