package artifact_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkCopy measures the choice the copy engine makes for a package
// (see artifact/copy.go): a package of FERRY_BENCH_COPY_BLOBS (default 40)
// gzip layers of 16 MiB copied to the embedded registry and to an OCI
// layout store by Copy (one streaming walk) and by oras.CopyGraph over the
// package as an oras target (Fetch walks the archive to each blob), from
// ferry's .tar.zst (whose layers are raw zstd blocks, passed over by
// seeking) and from the same archive as one zstd frame (as `tar --zstd`
// makes it: passing over a blob means decompressing it); then signing the
// .tar.zst (read, verified and written again). Each copy goes to a
// repository or store of its own. Budget: from one frame, the streaming
// walk at least twice as fast as oras.CopyGraph (from ferry's .tar.zst the
// two are within this machine's noise of each other; the ratio is printed).
func BenchmarkCopy(b *testing.B) {
	ctx := context.Background()
	n := envInt("FERRY_BENCH_COPY_BLOBS", 40)
	dir := b.TempDir()
	genBlobImages(b, dir, n, 16)
	def, err := definition.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	pkg := filepath.Join(b.TempDir(), "copy.tar.zst")
	if _, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: pkg}); err != nil {
		b.Fatal(err)
	}
	oneFrame := filepath.Join(b.TempDir(), "one-frame.tar.zst")
	recompress(b, pkg, oneFrame)
	host := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: b.TempDir()}))
	signer, _ := keyPair(b, b.TempDir(), "bench")
	repos := 0
	for range b.N {
		for _, src := range []struct{ name, path string }{{"ferry's .tar.zst", pkg}, {"a one-frame .tar.zst", oneFrame}} {
			for _, dst := range []string{"registry", "layout"} {
				took := map[string]time.Duration{}
				for _, how := range []string{"oras.CopyGraph", "streaming walk"} {
					r, err := artifact.Open(ctx, src.path)
					if err != nil {
						b.Fatal(err)
					}
					var target oras.Target
					if dst == "registry" {
						repos++
						target = remoteRepo(b, fmt.Sprintf("%s/bench/copy-%d:1", host, repos))
					} else if target, err = oci.New(filepath.Join(b.TempDir(), "layout")); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					if how == "oras.CopyGraph" {
						err = oras.CopyGraph(ctx, r, target, r.Root(), oras.DefaultCopyGraphOptions)
					} else {
						_, err = artifact.Copy(ctx, r, "", target, "1", artifact.CopyOptions{})
					}
					if err != nil {
						b.Fatalf("%s from %s to a %s: %v", how, src.name, dst, err)
					}
					took[how] = time.Since(start)
				}
				slow, fast := took["oras.CopyGraph"], took["streaming walk"]
				fmt.Printf("copy %d × 16 MiB from %s to a %s: oras.CopyGraph %.2fs, streaming walk %.2fs (%.1f×)\n",
					n, src.name, dst, slow.Seconds(), fast.Seconds(), slow.Seconds()/fast.Seconds())
				if src.path == oneFrame && 2*fast > slow {
					b.Errorf("from %s to a %s, the streaming walk took %s, oras.CopyGraph %s", src.name, dst, fast, slow)
				}
			}
		}
		start := time.Now()
		if _, err := artifact.Sign(ctx, openPkg(b, pkg), "", signer, artifact.SignOptions{}); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("sign %d × 16 MiB .tar.zst: %.2fs\n", n, time.Since(start).Seconds())
	}
}

// recompress writes the archive src as one zstd frame at dst.
func recompress(b testing.TB, src, dst string) {
	b.Helper()
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	dec, err := zstd.NewReader(in)
	if err != nil {
		b.Fatal(err)
	}
	defer dec.Close()
	out, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	enc, err := zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(enc, dec); err != nil {
		b.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}

// genBlobImages writes an OCI layout of images of n random layers of mib
// MiB each (4 to an image) under dir/images, and a ferry.yaml carrying them.
func genBlobImages(b testing.TB, dir string, n, mib int) {
	b.Helper()
	ctx := context.Background()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		b.Fatal(err)
	}
	rng := fixture.Rand(uint64(n))
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: bench, version: '1'}\nplatforms: [linux/" + runtime.GOARCH + "]\ncomponents:\n  - name: images\n    images:\n"
	for img := 0; img*4 < n; img++ {
		var layers []fixture.Layer
		for j := img * 4; j < min(n, img*4+4); j++ {
			layers = append(layers, fixture.NewLayer(rng, mib<<20))
		}
		d, err := fixture.PushImage(ctx, store, fixture.Platform("linux", runtime.GOARCH, ""), layers)
		if err != nil {
			b.Fatal(err)
		}
		tag := fmt.Sprintf("img%d", img)
		if err := store.Tag(ctx, d, tag); err != nil {
			b.Fatal(err)
		}
		def += fmt.Sprintf("      - {ref: bench/%s:1, layout: images, tag: %s}\n", tag, tag)
	}
	writeFile(b, filepath.Join(dir, "ferry.yaml"), def)
}
