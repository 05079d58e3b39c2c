package artifact_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/peertool"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkPushPull measures `ferry package push` and `pull` of a generated
// package (FERRY_BENCH_PUSH_MIB, default 1024 MiB) against the embedded
// registry, beside `crane push`/`crane pull` of the same images as an OCI
// layout and a plain file copy of the archive, in the same run.
// Budget (issue 3): ≤ 1.0× crane, ≤ 1.5× the file copy, peak RSS < 150 MiB.
func BenchmarkPushPull(b *testing.B) {
	crane := peertool.Require(b, "crane")
	ferry := buildFerry(b)
	mib := 1024
	if s := os.Getenv("FERRY_BENCH_PUSH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	dir := b.TempDir()
	genImageSet(b, dir, mib)
	def, err := artifact.LoadDefinition(dir)
	if err != nil {
		b.Fatal(err)
	}
	pkg := filepath.Join(b.TempDir(), "bench.tar.zst")
	if _, err := artifact.Create(context.Background(), def, artifact.CreateOptions{Output: pkg}); err != nil {
		b.Fatal(err)
	}
	host := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: b.TempDir()}))
	timeCmd := func(name string, args ...string) (time.Duration, int64) {
		syscall.Sync()
		start := time.Now()
		rss, out, err := runPeakRSS(exec.Command(name, args...))
		if err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return time.Since(start), rss
	}
	for i := range b.N {
		repo := fmt.Sprintf("%s/run%d", host, i)
		cp := func() time.Duration {
			syscall.Sync()
			start := time.Now()
			copyFile(b, pkg, filepath.Join(b.TempDir(), "copy.tar.zst"))
			return time.Since(start)
		}()
		ferryPush, pushRSS := timeCmd(ferry, "package", "push", pkg, repo+"/ferry:1")
		cranePush, _ := timeCmd(crane, "push", "--index", filepath.Join(dir, "images"), repo+"/crane:1")
		out := filepath.Join(b.TempDir(), "pulled.tar.zst")
		ferryPull, pullRSS := timeCmd(ferry, "package", "pull", repo+"/ferry:1", "-o", out)
		cranePull, _ := timeCmd(crane, "pull", "--format", "oci", repo+"/crane:1", filepath.Join(b.TempDir(), "layout"))
		fmt.Printf("push %d MiB: ferry %.2fs, crane %.2fs (ratio %.2f, budget 1.00), file copy %.2fs (ratio %.2f, budget 1.50), peak RSS %d MiB\n",
			mib, ferryPush.Seconds(), cranePush.Seconds(), ferryPush.Seconds()/cranePush.Seconds(), cp.Seconds(), ferryPush.Seconds()/cp.Seconds(), pushRSS)
		fmt.Printf("pull %d MiB: ferry %.2fs, crane %.2fs (ratio %.2f, budget 1.00), file copy %.2fs (ratio %.2f, budget 1.50), peak RSS %d MiB\n",
			mib, ferryPull.Seconds(), cranePull.Seconds(), ferryPull.Seconds()/cranePull.Seconds(), cp.Seconds(), ferryPull.Seconds()/cp.Seconds(), pullRSS)
		b.ReportMetric(ferryPush.Seconds()/cranePush.Seconds(), "push-x-crane")
		b.ReportMetric(ferryPull.Seconds()/cranePull.Seconds(), "pull-x-crane")
		for name, r := range map[string]float64{
			"push/crane": ferryPush.Seconds() / cranePush.Seconds(), "pull/crane": ferryPull.Seconds() / cranePull.Seconds(),
		} {
			if r > 1.0 {
				b.Errorf("%s = %.2f, budget 1.0", name, r)
			}
		}
		for name, r := range map[string]float64{"push/copy": ferryPush.Seconds() / cp.Seconds(), "pull/copy": ferryPull.Seconds() / cp.Seconds()} {
			if r > 1.5 {
				b.Errorf("%s = %.2f, budget 1.5", name, r)
			}
		}
		if pushRSS >= 150 || pullRSS >= 150 {
			b.Errorf("peak RSS push %d MiB, pull %d MiB; budget < 150", pushRSS, pullRSS)
		}
	}
}

func copyFile(b *testing.B, src, dst string) {
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}
