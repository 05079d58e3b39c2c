package chartrender_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// exponentialInclude is a template including itself twice at each of 40
// levels: 2^40 calls.
const exponentialInclude = `{{- define "boom" }}{{ if lt (int .) 40 }}{{ include "boom" (add1 .) }}{{ include "boom" (add1 .) }}{{ end }}{{ end -}}
{{ include "boom" 0 }}
`

// hostileCharts are charts of a few KB (compressed) that cost a renderer
// gigabytes, minutes or an endless output: the issue's, and the YAML of a
// values.yaml. Each is a map of file to content in the chart's folder
// (Chart.yaml added) and the limit it must be refused at: "memory", "time"
// or "output", or "" for an error of Helm's own.
var hostileCharts = []struct {
	Name     string
	Files    map[string]string
	Resource string
}{
	{"until 100000000", map[string]string{"templates/a.yaml": "{{ $x := until 100000000 }}n: {{ len $x }}\n"}, "memory"},
	{"repeat 1073741824", map[string]string{"templates/a.yaml": `a: {{ repeat 1073741824 "x" }}` + "\n"}, "memory"},
	{"1 GB by nested ranges", map[string]string{"templates/a.yaml": `a: {{ range until 1000 }}{{ range until 1000 }}{{ repeat 1000 "x" }}{{ end }}{{ end }}` + "\n"}, "memory"},
	{"exponential include", map[string]string{"templates/a.yaml": exponentialInclude}, "time"},
	{"output past the limit", map[string]string{"templates/a.yaml": `{{ range until 8 }}---
kind: ConfigMap
data: {a: {{ repeat 1048576 "x" }}}
{{ end }}`}, "output"},
	{"values.yaml of 2,500,000 nodes", map[string]string{"values.yaml": "a: [" + strings.Repeat("0,", 2_500_000) + "0]\n"}, "memory"},
	{"values.yaml nested 100,000 deep", map[string]string{"values.yaml": "a: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + "\n"}, ""},
	// Read by ferry itself: every rule matched against every path.
	{".helmignore of 5 MiB", map[string]string{".helmignore": strings.Repeat("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b\n", 5<<20/31)}, ""},
	{"10,001 files", manyFiles(10_001), ""},
}

// manyFiles is n empty templates.
func manyFiles(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("templates/f%d.yaml", i)] = ""
	}
	return m
}

// hostileLimits are lower than the defaults, so that the test is quick;
// the CLI's test (cmd/ferry) refuses a chart under the defaults.
var hostileLimits = chartrender.Limits{Memory: 256 << 20, Timeout: 5 * time.Second, Output: 4 << 20}

// writeChart writes a chart named name into dir/charts/name with files,
// and a definition of one component with it; it returns the definition.
func writeChart(t testing.TB, dir, name string, files map[string]string) *definition.Definition {
	t.Helper()
	writeFile(t, filepath.Join(dir, "charts", name, "Chart.yaml"), "apiVersion: v2\nname: "+name+"\nversion: 1.0.0\n")
	for f, body := range files {
		writeFile(t, filepath.Join(dir, "charts", name, f), body)
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: h, version: '1'}\ncomponents:\n  - name: c\n    charts:\n      - path: charts/"+name+"\n")
	return load(t, dir)
}

// TestHostileChartsBounded: each hostile chart is refused in one line
// naming the chart and the limit, within the time limit (plus a start);
// the child's peak memory stays within its limit, and this process's
// (which holds the chart's files and what it renders, no more) low.
func TestHostileChartsBounded(t *testing.T) {
	resetPeakRSS(t)
	for _, h := range hostileCharts {
		t.Run(h.Name, func(t *testing.T) {
			def := writeChart(t, t.TempDir(), "h", h.Files)
			r := &chartrender.Limited{Limits: hostileLimits}
			defer r.Close()
			start := time.Now()
			_, err := build.FindImages(context.Background(), def, build.FindImagesOptions{Charts: r, Render: r})
			took := time.Since(start)
			if err == nil {
				t.Fatal("rendered")
			}
			msg := err.Error()
			t.Logf("refused in %v: %s", took.Round(time.Millisecond), msg)
			if strings.Contains(msg, "\n") || !strings.Contains(msg, "chart charts/h: ") {
				t.Errorf("%q: not one line naming the chart", msg)
			}
			if took > hostileLimits.Timeout+10*time.Second {
				t.Errorf("refused after %v", took)
			}
			var le *chartrender.LimitError
			if h.Resource == "" {
				if errors.As(err, &le) {
					t.Errorf("refused at a limit, want Helm's error")
				}
				return
			}
			if !errors.As(err, &le) || le.Resource != h.Resource {
				t.Fatalf("%v, want a refusal at the %s limit", err, h.Resource)
			}
			if want := "passed its limit of " + le.Limit; !strings.HasSuffix(msg, want) {
				t.Errorf("%q does not end %q", msg, want)
			}
			// The kernel caps the child's heap (RLIMIT_DATA, 7/8 of the
			// limit); its resident set also counts the binary's code
			// pages (~100 MiB of ferry's, shared with the parent), which
			// a poll can catch on top of a heap at its cap.
			if le.PeakRSS > hostileLimits.Memory+128<<20 {
				t.Errorf("the child peaked at %d MiB, limit %d MiB", le.PeakRSS>>20, hostileLimits.Memory>>20)
			}
		})
	}
	if peak := peakRSS(t); peak > 200<<20 {
		t.Errorf("this process peaked at %d MiB", peak>>20)
	} else {
		t.Logf("this process peaked at %d MiB", peak>>20)
	}
}

// TestLimitedKeepsItsChild: charts after the first go to the same child;
// after a refusal, a new one takes the next chart.
func TestLimitedKeepsItsChild(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// The child, through a script that counts its starts.
	starts := filepath.Join(dir, "starts")
	exe := filepath.Join(dir, "child")
	writeFile(t, exe, "#!/bin/sh\necho >> "+starts+"\nexec "+os.Args[0]+" \"$@\"\n")
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &chartrender.Limited{Exe: exe, Limits: hostileLimits}
	defer r.Close()
	ok := writeChart(t, filepath.Join(dir, "ok"), "ok", map[string]string{"templates/a.yaml": "kind: ConfigMap\n"})
	bad := writeChart(t, filepath.Join(dir, "bad"), "bad", map[string]string{"templates/a.yaml": `a: {{ repeat 1073741824 "x" }}`})
	count := func() int {
		b, _ := os.ReadFile(starts)
		return strings.Count(string(b), "\n")
	}
	for i := range 3 {
		if _, err := build.FindImages(ctx, ok, build.FindImagesOptions{Charts: r, Render: r}); err != nil {
			t.Fatalf("chart %d: %v", i, err)
		}
	}
	if n := count(); n != 1 {
		t.Errorf("3 charts packaged and rendered by %d children, want 1", n)
	}
	if _, err := build.FindImages(ctx, bad, build.FindImagesOptions{Charts: r, Render: r}); err == nil {
		t.Fatal("the hostile chart rendered")
	}
	if _, err := build.FindImages(ctx, ok, build.FindImagesOptions{Charts: r, Render: r}); err != nil {
		t.Fatalf("after a refusal: %v", err)
	}
	if n := count(); n != 2 {
		t.Errorf("%d children, want 2 (one after the refusal)", n)
	}
	if err := r.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// resetPeakRSS resets this process's peak resident set (VmHWM).
func resetPeakRSS(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS: %v", err)
	}
}

// peakRSS is this process's peak resident set since resetPeakRSS.
func peakRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal(fmt.Errorf("no VmHWM"))
	return 0
}
