package registry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkGCRatio measures garbage collection of a filesystem storage of
// FERRY_BENCH_GC_GIB GiB (default 10) in 64 MiB images, one a repository,
// a fifth of them deleted (20% garbage): `ferry registry gc` against Debian's
// docker-registry garbage-collect (distribution 2.8) on a hard-linked copy
// of the same storage, each a separate process. It reports each one's wall
// time, CPU time and peak memory (maximum RSS), and fails unless both free
// the same bytes. Reported by `make bench-gc`; there is no budget.
func BenchmarkGCRatio(b *testing.B) {
	dist := peertool.Require(b, "docker-registry")
	gib := 10
	if s := os.Getenv("FERRY_BENCH_GC_GIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("FERRY_BENCH_GC_GIB=%q: want a whole number of GiB", s)
		}
		gib = n
	}
	const layer = 64 << 20
	images := gib << 30 / layer
	dir := b.TempDir()
	ferryRoot, distRoot := filepath.Join(dir, "ferry"), filepath.Join(dir, "dist")

	start := time.Now()
	fillStorage(b, ferryRoot, images, layer)
	b.Logf("storage of %d GiB (%d images, %d deleted) made in %v", gib, images, images/5, time.Since(start).Round(time.Second))
	if out, err := exec.Command("cp", "-al", ferryRoot, distRoot).CombinedOutput(); err != nil {
		b.Fatalf("cp -al: %v: %s", err, out)
	}
	before := blobBytes(b, ferryRoot)

	cfg := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf("version: 0.1\nlog: {level: error}\nstorage:\n  filesystem: {rootdirectory: %s}\n  delete: {enabled: true}\n", distRoot)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		// Settle 1 ms: no other registry serves the storage (the default
		// waits 5 s, twice, for those that do).
		f := measure(b, exec.Command(ferryBin(b), "registry", "gc", "--root", ferryRoot, "--settle", "1ms", "-o", "json"))
		d := measure(b, exec.Command(dist, "garbage-collect", cfg))
		fa, da := blobBytes(b, ferryRoot), blobBytes(b, distRoot)
		if fa != da || fa >= before {
			b.Fatalf("blob bytes before %d; after ferry's collection %d, after distribution 2.8's %d", before, fa, da)
		}
		b.ReportMetric(f.wall.Seconds(), "ferry-s")
		b.ReportMetric(d.wall.Seconds(), "dist28-s")
		b.ReportMetric(f.wall.Seconds()/d.wall.Seconds(), "ratio")
		b.ReportMetric(f.cpu.Seconds(), "ferry-cpu-s")
		b.ReportMetric(d.cpu.Seconds(), "dist28-cpu-s")
		b.ReportMetric(float64(f.rss)/(1<<20), "ferry-MiB")
		b.ReportMetric(float64(d.rss)/(1<<20), "dist28-MiB")
		b.ReportMetric(float64(before-fa)/(1<<30), "freed-GiB")
		b.ReportMetric(float64(gib), "storage-GiB")
	}
}

// usage is what a process cost.
type usage struct {
	wall, cpu time.Duration
	rss       int64 // bytes
}

func measure(b *testing.B, cmd *exec.Cmd) usage {
	b.Helper()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return usage{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), rss: ru.Maxrss << 10}
}

// ferryBin is FERRY_BIN, or ferry built for the benchmark.
func ferryBin(b *testing.B) string {
	if bin := os.Getenv("FERRY_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "ferry")
	build := exec.Command("go", "build", "-o", bin, "../cmd/ferry")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/ferry: %v\n%s", err, out)
	}
	return bin
}

// fillStorage pushes n images of one layer of size bytes (pseudo-random,
// so incompressible and distinct), each in its own repository, into a
// registry on root, then deletes every fifth image's manifest.
func fillStorage(b *testing.B, root string, n int, size int64) {
	b.Helper()
	ctx := context.Background()
	ts := registrytest.NewServer(b, registry.Config{RootDir: root})
	defer ts.Close()
	host := registrytest.Host(ts)
	for i := range n {
		repo, err := remote.NewRepository(fmt.Sprintf("%s/bench/gc-%04d", host, i))
		if err != nil {
			b.Fatal(err)
		}
		repo.PlainHTTP = true
		seed := uint64(i)
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(rand.NewChaCha8(chachaSeed(seed)), size)); err != nil {
			b.Fatal(err)
		}
		layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.NewDigest(digest.SHA256, h), Size: size}
		if err := repo.Push(ctx, layerDesc, io.LimitReader(rand.NewChaCha8(chachaSeed(seed)), size)); err != nil {
			b.Fatal(err)
		}
		cfg := []byte(fmt.Sprintf(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]}}`, layerDesc.Digest))
		cfgDesc := push(b, repo, ocispec.MediaTypeImageConfig, cfg)
		m, err := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
			Config: cfgDesc, Layers: []ocispec.Descriptor{layerDesc}})
		if err != nil {
			b.Fatal(err)
		}
		mDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(m), Size: int64(len(m))}
		if err := repo.PushReference(ctx, mDesc, bytes.NewReader(m), "1.0"); err != nil {
			b.Fatal(err)
		}
		if i%5 == 4 {
			if err := repo.Delete(ctx, mDesc); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func chachaSeed(i uint64) (s [32]byte) {
	for j := range 8 {
		s[j] = byte(i >> (8 * j))
	}
	return s
}

func push(b *testing.B, repo *remote.Repository, mediaType string, data []byte) ocispec.Descriptor {
	b.Helper()
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := repo.Push(context.Background(), desc, bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	return desc
}

// blobBytes is the size of the blobs' data files under a storage root.
func blobBytes(b *testing.B, root string) int64 {
	b.Helper()
	var total int64
	err := filepath.WalkDir(filepath.Join(root, "docker/registry/v2/blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && d.Name() == "data" {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}
