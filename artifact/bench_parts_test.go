package artifact_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
)

// BenchmarkParts measures `ferry package verify --key` of a signed package
// split into 5 parts against the same verify of the one archive they were
// split from, run in turns (best of 3 each, the files in the page cache),
// and the peak RSS of both.
// Budget (issue 33): the parts ≤ 1.05× the archive; memory flat (the
// parts' peak RSS < 150 MiB, and at most 16 MiB over the archive's).
// FERRY_PARTS_BENCH_MIB changes the package's size (default 1024; the
// budget is checked from 1 GiB, below it process start-up dominates).
func BenchmarkParts(b *testing.B) {
	ferry := buildFerry(b)
	benchenv.Quiet(b, 8)
	mib := 1024
	if s := os.Getenv("FERRY_PARTS_BENCH_MIB"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 16 {
			mib = n
		}
	}
	dir := b.TempDir()
	genImageSet(b, dir, mib)
	keys := b.TempDir()
	env := append(os.Environ(), "COSIGN_PASSWORD=bench")
	gen := exec.Command(ferry, "key", "generate", keys)
	gen.Env = env
	if out, err := gen.CombinedOutput(); err != nil {
		b.Fatalf("key generate: %v\n%s", err, out)
	}
	pkg := filepath.Join(b.TempDir(), "bench.tar.zst")
	create := exec.Command(ferry, "package", "create", dir, "-f", pkg, "--sign-key", filepath.Join(keys, "cosign.key"), "--sbom=false")
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		b.Fatalf("create: %v\n%s", err, out)
	}
	fi, err := os.Stat(pkg)
	if err != nil {
		b.Fatal(err)
	}
	// Five parts: four of a fifth of the archive, rounded up, and the rest.
	base := filepath.Join(b.TempDir(), "bench.tar.zst")
	ps, err := artifact.Split(context.Background(), pkg, artifact.SplitOptions{PartSize: (fi.Size() + 4) / 5, Base: base})
	if err != nil {
		b.Fatal(err)
	}
	if len(ps.Parts) != 5 {
		b.Fatalf("split into %d parts, want 5", len(ps.Parts))
	}
	pub := filepath.Join(keys, "cosign.pub")
	verify := func(path string) (time.Duration, int64) {
		start := time.Now()
		rss, msg, err := runPeakRSS(exec.Command(ferry, "package", "verify", path, "--key", pub))
		if err != nil {
			b.Fatalf("verify %s: %v\n%s", filepath.Base(path), err, msg)
		}
		return time.Since(start), rss
	}
	for range b.N {
		verify(pkg) // the page cache holds the archive and the parts alike
		verify(base)
		var one, five time.Duration
		var oneRSS, fiveRSS int64
		for i := range 3 {
			t1, r1 := verify(pkg)
			t5, r5 := verify(base + artifact.PartsIndexSuffix)
			if i == 0 || t1 < one {
				one = t1
			}
			if i == 0 || t5 < five {
				five = t5
			}
			oneRSS, fiveRSS = max(oneRSS, r1), max(fiveRSS, r5)
		}
		ratio := five.Seconds() / one.Seconds()
		b.ReportMetric(ratio, "x-archive")
		b.ReportMetric(float64(fiveRSS), "MiB-peak-rss")
		fmt.Printf("verify %5d MiB in 5 parts: %6.2fs, the one archive %6.2fs, ratio %.3f (budget 1.05); peak RSS %d MiB (archive %d MiB)\n",
			mib, five.Seconds(), one.Seconds(), ratio, fiveRSS, oneRSS)
		if ratio > 1.05 && mib >= 1024 {
			b.Errorf("verifying 5 parts is %.3f× verifying the archive, budget 1.05×", ratio)
		}
		if fiveRSS >= 150 || fiveRSS > oneRSS+16 {
			b.Errorf("peak RSS %d MiB in parts, %d MiB in one archive: budget < 150 MiB and at most 16 MiB more", fiveRSS, oneRSS)
		}
	}
}
