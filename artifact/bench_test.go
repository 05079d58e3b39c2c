package artifact_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// benchSizesMiB are the image-set sizes of BenchmarkCreate; FERRY_BENCH_SIZES
// ("100,1024,2048") overrides them.
var benchSizesMiB = []int{100, 1024, 2048}

// BenchmarkCreate measures `ferry package create` of a generated image set
// against the floor of sha256 over the same bytes and zstd over those not
// compressed already, in the same run,
// and the peak RSS of the ferry process at several sizes.
// Budget (issue 2): time ≤ 1.2× the floor; peak RSS < 150 MiB, flat.
func BenchmarkCreate(b *testing.B) {
	ferry := buildFerry(b)
	sizes := benchSizesMiB
	benchenv.Quiet(b, 8)
	if s := os.Getenv("FERRY_BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range splitComma(s) {
			var n int
			fmt.Sscan(f, &n)
			sizes = append(sizes, n)
		}
	}
	for _, mib := range sizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			dir := b.TempDir()
			blobs := genImageSet(b, dir, mib)
			for range b.N {
				// Both sides start with the inputs in the page cache and no
				// dirty pages left from generating them.
				syscall.Sync()
				floor := hashAndCompress(b, blobs)
				out := filepath.Join(b.TempDir(), "bench.tar.zst")
				start := time.Now()
				// Without SBOMs: this is the packaging floor's budget;
				// BenchmarkCreateSBOM measures what SBOMs add.
				cmd := exec.Command(ferry, "package", "create", dir, "-f", out, "--sbom=false")
				rss, msg, err := runPeakRSS(cmd)
				if err != nil {
					b.Fatalf("create: %v\n%s", err, msg)
				}
				took := time.Since(start)
				ratio := took.Seconds() / floor.Seconds()
				b.ReportMetric(ratio, "x-floor")
				b.ReportMetric(float64(rss), "MiB-peak-rss")
				b.ReportMetric(float64(mib)/took.Seconds(), "MiB/s")
				fmt.Printf("create %5d MiB: %6.2fs, floor (sha256, zstd of what is not gzip) %6.2fs, ratio %.2f (budget 1.20), peak RSS %d MiB (budget 150)\n",
					mib, took.Seconds(), floor.Seconds(), ratio, rss)
				// The time budget is set at 1 GiB (issue 2); other sizes are
				// reported: below it the process start-up (≈ 70 ms) weighs,
				// above it the page cache's write-back. RSS must stay flat.
				if ratio > 1.2 && mib == 1024 {
					b.Errorf("create is %.2f× the floor, budget 1.2×", ratio)
				}
				if rss >= 150 {
					b.Errorf("peak RSS %d MiB, budget < 150 MiB", rss)
				}
				os.Remove(out)
			}
		})
	}
}

// runPeakRSS runs cmd and returns its peak RSS in MiB, polled from
// /proc/PID/status (VmHWM). rusage's maxrss is no use here: a child forked
// from this large test process inherits the parent's high-water mark.
func runPeakRSS(cmd *exec.Cmd) (int64, []byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if kb := vmHWM(cmd.Process.Pid); kb > peak {
			peak = kb
		}
		select {
		case err := <-done:
			return peak / 1024, out.Bytes(), err
		case <-tick.C:
		}
	}
}

// vmHWM reads a process's peak resident set size in KiB, 0 if unknown.
func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb
		}
	}
	return 0
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// buildFerry builds ferry as `make build` does (the front binary, ferry-full
// and ferry-sbom beside it) into a temporary folder and returns the front; FERRY_BIN names
// one already built instead.
func buildFerry(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("FERRY_BIN"); bin != "" {
		return bin
	}
	dir := b.TempDir()
	for _, args := range [][]string{
		{"-o", filepath.Join(dir, "ferry-full"), "../cmd/ferry"},
		{"-o", filepath.Join(dir, "ferry"), "../cmd/ferry/front"},
	} {
		args = append([]string{"build", "-trimpath", "-ldflags=-s -w"}, args...)
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build ferry: %v\n%s", err, out)
		}
	}
	// create's SBOMs are made by the helper beside ferry-full.
	if _, err := sbomexectest.Build(dir); err != nil {
		b.Fatal(err)
	}
	return filepath.Join(dir, "ferry")
}

// genImageSet writes an OCI layout of images totalling about mib MiB (64 MiB
// layers, 4 per image, the first layer shared by all) and a definition using
// them; it returns the paths of the layer blobs.
func genImageSet(b testing.TB, dir string, mib int) []string {
	b.Helper()
	ctx := context.Background()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		b.Fatal(err)
	}
	rng := fixture.Rand(uint64(mib))
	layerMiB := min(64, mib/4)
	nLayers := mib / layerMiB
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: bench, version: '1'}\nplatforms: [linux/" + runtime.GOARCH + "]\ncomponents:\n  - name: images\n    images:\n"
	var layers []fixture.Layer
	img := 0
	flush := func() {
		if len(layers) == 0 {
			return
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
		img++
		layers = nil
	}
	for i := range nLayers {
		layers = append(layers, fixture.NewLayer(rng, layerMiB<<20))
		if (i+1)%4 == 0 {
			flush()
		}
	}
	flush()
	writeFile(b, filepath.Join(dir, "ferry.yaml"), def)
	paths, _ := filepath.Glob(filepath.Join(dir, "images", ocispec.ImageBlobsDir, "sha256", "*"))
	return paths
}

// hashAndCompress is the floor: what create cannot avoid doing to the
// bytes, output discarded: sha256 over every blob, and zstd (ferry's
// settings) over those not compressed already (gzip layers go into the
// archive in raw blocks; see frames.go).
func hashAndCompress(b *testing.B, paths []string) time.Duration {
	b.Helper()
	start := time.Now()
	enc, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2), zstd.WithWindowSize(4<<20))
	buf := make([]byte, 1<<20)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		var magic [2]byte
		_, _ = f.ReadAt(magic[:], 0)
		var w io.Writer = enc
		if magic == [2]byte{0x1f, 0x8b} {
			w = io.Discard
		}
		h := sha256.New()
		if _, err := io.CopyBuffer(io.MultiWriter(h, w), f, buf); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	enc.Close()
	return time.Since(start)
}
