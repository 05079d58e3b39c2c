package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostileChartDef is a definition of one component with the chart
// charts/h.
const hostileChartDef = "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: h, version: '1'}\ncomponents:\n  - name: c\n    charts:\n      - path: charts/h\n"

// exponentialInclude is a template including itself twice at each of 40
// levels: 2^40 calls.
const exponentialInclude = `{{- define "boom" }}{{ if lt (int .) 40 }}{{ include "boom" (add1 .) }}{{ include "boom" (add1 .) }}{{ end }}{{ end -}}
{{ include "boom" 0 }}
`

// manyNodes is a values.yaml of 2,500,000 nodes (5 MB; some 500 MiB to
// parse).
var manyNodes = "a: [" + strings.Repeat("0,", 2_500_000) + "0]\n"

// TestCLIRenderLimits: find-images and create on a chart of a few KB built
// to cost gigabytes or minutes exit 1 with one line naming the chart and
// the limit (and the flag that raises it), within the limit and a few
// seconds, under the default limits; ferry's own peak memory stays low (the
// child bears the chart); nothing is written.
func TestCLIRenderLimits(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		args  []string
		want  string
		max   time.Duration
	}{
		{"until 100000000", map[string]string{"templates/a.yaml": "{{ $x := until 100000000 }}n: {{ len $x }}\n"},
			[]string{"package", "find-images"}, "chart charts/h: render: passed its limit of 512 MiB of memory (--render-memory raises it)", 15 * time.Second},
		{"exponential include", map[string]string{"templates/a.yaml": exponentialInclude}, []string{"package", "find-images"}, "chart charts/h: render: passed its limit of 30s (--render-timeout raises it)", 35 * time.Second},
		{"exponential include, --render-timeout 2s", map[string]string{"templates/a.yaml": exponentialInclude}, []string{"package", "find-images", "--render-timeout", "2s"}, "chart charts/h: render: passed its limit of 2s (--render-timeout raises it)", 7 * time.Second},
		{"values.yaml of 2,500,000 nodes, in the chart and its 3 subcharts", map[string]string{
			"values.yaml":          manyNodes,
			"charts/s1/Chart.yaml": "apiVersion: v2\nname: s1\nversion: 1.0.0\n", "charts/s1/values.yaml": manyNodes,
			"charts/s2/Chart.yaml": "apiVersion: v2\nname: s2\nversion: 1.0.0\n", "charts/s2/values.yaml": manyNodes,
			"charts/s3/Chart.yaml": "apiVersion: v2\nname: s3\nversion: 1.0.0\n", "charts/s3/values.yaml": manyNodes,
		}, []string{"package", "create", "-f", "h.tar", "--sbom=false"}, "load chart charts/h: passed its limit of 512 MiB of memory (--render-memory raises it)", 15 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "ferry.yaml"), hostileChartDef)
			writeFile(t, filepath.Join(dir, "charts", "h", "Chart.yaml"), "apiVersion: v2\nname: h\nversion: 1.0.0\n")
			for f, body := range tt.files {
				writeFile(t, filepath.Join(dir, "charts", "h", f), body)
			}
			before, _ := os.ReadDir(dir)
			start := time.Now()
			stdout, stderr, code, peak := runFerryPeak(t, dir, tt.args...)
			took := time.Since(start)
			t.Logf("exit %d in %v, ferry's peak RSS %d MiB: %s", code, took.Round(time.Millisecond), peak>>20, strings.TrimSpace(stderr))
			if code != 1 || stdout != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			if !strings.HasPrefix(stderr, "ferry: ") || !strings.HasSuffix(stderr, tt.want+"\n") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line ending %q", stderr, tt.want)
			}
			if took > tt.max {
				t.Errorf("refused after %v, want at most %v", took, tt.max)
			}
			if peak > 200<<20 {
				t.Errorf("ferry itself peaked at %d MiB", peak>>20)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("files before %d, after %d", len(before), len(after))
			}
		})
	}

	_, stderr, code := runFerry(t, t.TempDir(), "package", "find-images", "--render-memory", "1MiB")
	if want := "ferry: --render-memory 1MiB: at least 128MiB (ferry itself takes about 80 MiB)\n"; code != 1 || stderr != want {
		t.Errorf("--render-memory 1MiB: exit %d, %q; want %q", code, stderr, want)
	}
}

// runFerryPeak runs ferry in dir and returns its stdout, stderr, exit code
// and peak resident set (its own, not its children's: VmHWM, polled).
func runFerryPeak(t *testing.T, dir string, args ...string) (string, string, int, int64) {
	t.Helper()
	cmd := exec.Command(ferryBin, args...)
	cmd.Dir = dir
	cmd.Env = withoutPassword(os.Environ())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	var err error
	for waiting := true; waiting; {
		peak = max(peak, vmHWM(cmd.Process.Pid))
		select {
		case err = <-done:
			waiting = false
		case <-time.After(20 * time.Millisecond):
		}
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code, peak
}

// vmHWM is a running process's peak resident set, 0 once it has ended.
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
