package artifact_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// BenchmarkCreateSBOM measures what SBOMs cost `ferry package create`: the
// same definition created with --sbom=false and with SBOMs (the default:
// ferry-full runs the ferry-sbom helper beside it once per image platform),
// one after the other in each iteration, by the binary, with each run's
// time and peak RSS and the bytes the SBOMs add to the archive. The images:
// the generated 100 MiB set of BenchmarkCreate (random files, nothing to
// find, all to unpack) and the SBOM fixture image (a dpkg status with two
// packages, os-release, a Go binary). No budget: the ratio is reported
// (README, "SBOMs").
func BenchmarkCreateSBOM(b *testing.B) {
	ferry := buildFerry(b)
	ctx := context.Background()
	dir := b.TempDir()
	genImageSet(b, dir, 100)
	bin, err := fixture.GoBinary(ctx, b.TempDir(), runtime.GOARCH)
	if err != nil {
		b.Fatal(err)
	}
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		b.Fatal(err)
	}
	d, err := fixture.SBOMImage(ctx, store, fixture.Platform("linux", runtime.GOARCH, ""), bin)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Tag(ctx, d, "sbom"); err != nil {
		b.Fatal(err)
	}
	def, err := os.ReadFile(filepath.Join(dir, "ferry.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	writeFile(b, filepath.Join(dir, "ferry.yaml"), string(def)+"      - {ref: bench/sbom:1, layout: images, tag: sbom}\n")

	// run returns the time, ferry's peak RSS, the peak RSS of any process
	// it ran (the ferry-sbom helper: the kernel reports the largest of a
	// child and its reaped children) and the archive's size.
	run := func(out string, args ...string) (time.Duration, int64, int64, int64) {
		start := time.Now()
		cmd := exec.Command(ferry, append([]string{"package", "create", dir, "-f", out}, args...)...)
		rss, msg, err := runPeakRSS(cmd)
		if err != nil {
			b.Fatalf("create %v: %v\n%s", args, err, msg)
		}
		took := time.Since(start)
		var tree int64
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			tree = ru.Maxrss / 1024
		}
		fi, err := os.Stat(out)
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(out)
		return took, rss, tree, fi.Size()
	}
	for range b.N {
		out := filepath.Join(b.TempDir(), "bench.tar.zst")
		without, rssWithout, _, sizeWithout := run(out, "--sbom=false")
		with, rssWith, treeWith, sizeWith := run(out)
		ratio := with.Seconds() / without.Seconds()
		b.ReportMetric(ratio, "x-without-sbom")
		b.ReportMetric(without.Seconds(), "s-without")
		b.ReportMetric(with.Seconds(), "s-with")
		b.ReportMetric(float64(rssWithout), "MiB-peak-rss-without")
		b.ReportMetric(float64(rssWith), "MiB-peak-rss-with")
		b.ReportMetric(float64(treeWith), "MiB-peak-rss-helper")
		b.ReportMetric(float64(sizeWith-sizeWithout)/1024, "KiB-added")
		fmt.Printf("create with SBOMs (2 images, 100 MiB): %.2fs vs %.2fs with --sbom=false, ratio %.2f; peak RSS of ferry %d vs %d MiB, of any process (ferry-sbom) %d MiB; archive +%d KiB\n",
			with.Seconds(), without.Seconds(), ratio, rssWith, rssWithout, treeWith, (sizeWith-sizeWithout)/1024)
	}
}
