package artifact_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkStartup measures what a command pays before its work (issue 15,
// item 13): `ferry version` beside `crane version`, and an unchanged
// re-push of a package (FERRY_BENCH_PUSH_MIB, default 1024 MiB) beside
// crane's re-push of the same images as an OCI layout, to the embedded
// registry, each tool's content already there. Each is the median of
// FERRY_BENCH_STARTUP_RUNS (default 15) runs, ferry and crane alternating.
// Budgets: each ≤ 2× crane's wall time; the peak RSS of `ferry version`
// ≤ 25 MiB, as GNU time reports it (wait4's count for a child of this
// process would include this process's own memory: Go starts children with
// vfork, and the kernel keeps the high-water mark of the memory a child
// was started in).
func BenchmarkStartup(b *testing.B) {
	crane := peertool.Require(b, "crane")
	ferry := buildFerry(b)
	mib, runs := envInt("FERRY_BENCH_PUSH_MIB", 1024), envInt("FERRY_BENCH_STARTUP_RUNS", 15)
	pkg, layout := benchPackage(b, mib)
	host := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: b.TempDir()}))
	ferryPush := []string{ferry, "package", "push", pkg, host + "/bench/ferry:1"}
	cranePush := []string{crane, "push", "--index", layout, host + "/bench/crane:1"}
	for _, args := range [][]string{ferryPush, cranePush} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	benchenv.Quiet(b, 8)
	for range b.N {
		cases := []struct {
			name, metric string
			ferry, peer  []string
		}{
			{"version", "version", []string{ferry, "version"}, []string{crane, "version"}},
			{fmt.Sprintf("re-push %d MiB", mib), "repush", ferryPush, cranePush},
		}
		for _, c := range cases {
			var fw, cw []benchRun
			for range runs {
				fw = append(fw, benchRun{wall: startupRun(b, c.ferry)})
				cw = append(cw, benchRun{wall: startupRun(b, c.peer)})
			}
			rss := peakRSS(b, c.ferry)
			f, p := median(fw).wall, median(cw).wall
			ratio := f.Seconds() / p.Seconds()
			fmt.Printf("%s (median of %d): ferry %.3fs (peak RSS %d MiB), crane %.3fs: ratio %.2f (budget 2.00)\n", c.name, runs, f.Seconds(), rss, p.Seconds(), ratio)
			b.ReportMetric(ratio, c.metric+"-x-crane")
			if ratio > 2 {
				b.Errorf("%s: ferry/crane = %.2f, budget 2.0", c.name, ratio)
			}
			if c.metric == "version" {
				b.ReportMetric(float64(rss), "version-peak-MiB")
				if rss > 25 {
					b.Errorf("ferry version: peak RSS %d MiB, budget 25", rss)
				}
			}
		}
	}
}

// startupRun runs a short command and returns its wall time.
func startupRun(b *testing.B, args []string) time.Duration {
	b.Helper()
	start := time.Now()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		b.Fatalf("%v: %v\n%s", args, err, out)
	}
	return wall
}

// peakRSS is the largest peak RSS, in MiB, of three runs of a command, as
// GNU time (/usr/bin/time, the Debian package time) reports it: exact even
// for a run of a few milliseconds.
func peakRSS(b *testing.B, args []string) int64 {
	b.Helper()
	var peak int64
	for range 3 {
		f, err := os.CreateTemp(b.TempDir(), "rss")
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
		out, err := exec.Command("/usr/bin/time", append([]string{"-o", f.Name(), "-f", "%M"}, args...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("/usr/bin/time %v: %v\n%s", args, err, out)
		}
		data, _ := os.ReadFile(f.Name())
		kib, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			b.Fatalf("/usr/bin/time %v printed %q", args, data)
		}
		peak = max(peak, kib/1024)
	}
	return peak
}
