package chartrender_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// cpuTime is the CPU this process and its waited-for children have used.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// BenchmarkFindImagesThirdParty: find-images over the third-party charts,
// loaded and rendered in the bounded child (a new one each run, ended at
// its end, as the CLI does) against the same in this process; reports
// both, their ratio in CPU (the child's included) and in time, and fails
// past 1.2×.
func BenchmarkFindImagesThirdParty(b *testing.B) {
	dir := b.TempDir()
	body := "components:\n"
	for _, c := range thirdparty.Charts {
		c.Copy(b, dir)
		body += "  - name: " + c.Name + "\n    charts:\n      - path: " + c.Name + "\n        namespace: " + c.Name + "\n"
	}
	writeFile(b, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: tp, version: '1'}\n"+body)
	def, err := definition.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	run := func(charts build.ChartPackager, render build.ChartRenderer, close func() error) (wall, cpu time.Duration) {
		start, startCPU := time.Now(), cpuTime()
		if _, err := build.FindImages(context.Background(), def, build.FindImagesOptions{Charts: charts, Render: render}); err != nil {
			b.Fatal(err)
		}
		if err := close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start), cpuTime() - startCPU
	}
	var inWall, inCPU, chWall, chCPU time.Duration
	for b.Loop() {
		w, c := run(chart.Packager{}, chartrender.Renderer{}, func() error { return nil })
		inWall, inCPU = inWall+w, inCPU+c
		r := &chartrender.Limited{}
		w, c = run(r, r, r.Close)
		chWall, chCPU = chWall+w, chCPU+c
	}
	n := float64(b.N)
	b.ReportMetric(inCPU.Seconds()/n, "in-process-cpu-s")
	b.ReportMetric(chCPU.Seconds()/n, "child-cpu-s")
	b.ReportMetric(chCPU.Seconds()/inCPU.Seconds(), "cpu-ratio")
	b.ReportMetric(chWall.Seconds()/inWall.Seconds(), "wall-ratio")
	b.Logf("in this process %v (CPU %v), in the child %v (CPU %v), per run of %d", inWall/time.Duration(b.N), inCPU/time.Duration(b.N), chWall/time.Duration(b.N), chCPU/time.Duration(b.N), b.N)
	if chCPU.Seconds() > 1.2*inCPU.Seconds() {
		b.Errorf("the child took %.2f× the CPU (budget 1.2×)", chCPU.Seconds()/inCPU.Seconds())
	}
}

// BenchmarkHostileCharts: each hostile chart refused under the default
// limits; reports the time to the refusal and the child's peak RSS, and
// fails past chartrender.DefaultMemory or DefaultTimeout (plus 5 s).
func BenchmarkHostileCharts(b *testing.B) {
	for _, h := range hostileCharts {
		b.Run(h.Name, func(b *testing.B) {
			def := writeChart(b, b.TempDir(), "h", h.Files)
			for b.Loop() {
				r := &chartrender.Limited{}
				start := time.Now()
				_, err := build.FindImages(context.Background(), def, build.FindImagesOptions{Charts: r, Render: r})
				d := time.Since(start)
				r.Close()
				var le *chartrender.LimitError
				switch {
				case err == nil:
					b.Logf("rendered within the default limits in %v", d.Round(time.Millisecond))
					continue
				case !errors.As(err, &le):
					b.Logf("refused in %v: %v", d.Round(time.Millisecond), err)
					continue
				}
				b.ReportMetric(d.Seconds(), "refused-s")
				b.ReportMetric(float64(le.PeakRSS>>20), "child-peak-MiB")
				b.Logf("refused in %v, the child's peak RSS %d MiB: %v", d.Round(time.Millisecond), le.PeakRSS>>20, err)
				if le.PeakRSS > chartrender.DefaultMemory+chartrender.DefaultMemory/8 || d > chartrender.DefaultTimeout+5*time.Second {
					b.Errorf("over budget: peak %d MiB, %v", le.PeakRSS>>20, d)
				}
			}
		})
	}
}
