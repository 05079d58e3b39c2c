package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/zarf/zarftest"
)

// Issue 49's budgets for `ferry package convert` and `ferry package import`
// of any hostile input: the ferry process's peak RSS, and the time to
// refuse (start-up included; refusals take milliseconds but for packages
// whose strays come before checksums.txt, zarftest.Hostile.Budget).
const (
	zarfHostileMaxRSS = 256 << 20
	zarfHostileTime   = 10 * time.Second
)

// measured is one run of ferry.
type measured struct {
	stdout, stderr string
	code           int
	took           time.Duration
	rss            int64 // bytes
}

// runMeasured runs ferry with args in dir, TMPDIR tmp, and measures its
// wall time and peak RSS. The RSS is the ferry process's own when GNU time
// starts it (a process this test starts itself is charged the test's own
// peak too: Go starts it with vfork); without GNU time it is that upper
// bound.
func runMeasured(t *testing.T, dir, tmp string, args ...string) measured {
	t.Helper()
	timeBin, _ := exec.LookPath("time")
	if _, err := os.Stat("/usr/bin/time"); err == nil {
		timeBin = "/usr/bin/time"
	}
	report := filepath.Join(t.TempDir(), "rss")
	cmd := exec.Command(ferryBin, args...)
	if timeBin != "" {
		cmd = exec.Command(timeBin, append([]string{"-f", "%M", "-o", report, ferryBin}, args...)...)
	}
	cmd.Dir = dir
	cmd.Env = append(withoutPassword(os.Environ()), "TMPDIR="+tmp)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	m := measured{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		m.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if timeBin == "" {
		m.rss = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
		return m
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(data))
	kb, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
	if err != nil {
		t.Fatalf("GNU time reported %q", data)
	}
	m.rss = kb << 10
	// GNU time tells of a non-zero exit on its report's first line only.
	return m
}

// TestCLIZarfHostile: every hostile zarf.yaml and built package of issue
// 49 is refused by the ferry binary in one line on stderr naming it, exit
// 1, within the time and peak-RSS budgets, reading nothing outside the
// definition's folder and writing nothing: no ferry.yaml, no package, no
// temporary file left. The largest definition the limits let through
// converts within the same memory.
func TestCLIZarfHostile(t *testing.T) {
	dir := t.TempDir()
	hostile := append(zarftest.HostileDefinitions(t, filepath.Join(dir, "defs")), zarftest.HostilePackages(t, filepath.Join(dir, "pkgs"))...)
	for _, h := range hostile {
		verb := "convert"
		if h.Import {
			verb = "import"
		}
		t.Run(verb+"/"+h.Name, func(t *testing.T) {
			tmp := t.TempDir()
			out := filepath.Join(t.TempDir(), "out.tar.zst")
			args := []string{"package", "convert", h.Path}
			if h.Import {
				args = []string{"package", "import", h.Path, "-f", out}
			}
			m := runMeasured(t, dir, tmp, args...)
			t.Logf("%s refused in %v, peak RSS %d MiB: %.300s", verb, m.took.Round(time.Millisecond), m.rss>>20, m.stderr)
			line := strings.TrimSuffix(m.stderr, "\n")
			if m.code != 1 || !strings.HasPrefix(line, "ferry: ") || strings.Contains(line, "\n") || len(line) > 2048 || !regexp.MustCompile(h.Want).MatchString(line) {
				t.Fatalf("exit %d, stderr (%d bytes) %.2000q; want exit 1 and one line matching %q", m.code, len(m.stderr), m.stderr, h.Want)
			}
			if strings.Contains(m.stdout+m.stderr, h.Secret) {
				t.Errorf("the output holds the outside file's text:\n%s", m.stdout)
			}
			if budget := max(zarfHostileTime, h.Budget); m.took > budget {
				t.Errorf("refused in %v, budget %v", m.took, budget)
			}
			if m.rss > zarfHostileMaxRSS {
				t.Errorf("peak RSS %d MiB, budget %d MiB", m.rss>>20, zarfHostileMaxRSS>>20)
			}
			written := []string{out}
			if !h.Import {
				written = append(written, filepath.Join(h.Path, "ferry.yaml"), filepath.Join(h.Path, "zarf-kustomize"))
			}
			for _, p := range written {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s was written", p)
				}
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
	t.Run("convert/largest accepted", func(t *testing.T) {
		def := filepath.Join(dir, "largest")
		writeFile(t, filepath.Join(def, "zarf.yaml"), zarftest.Largest())
		m := runMeasured(t, dir, t.TempDir(), "package", "convert", def, "--architecture", "amd64")
		t.Logf("converted in %v, peak RSS %d MiB: %s", m.took.Round(time.Millisecond), m.rss>>20, lastLine(m.stdout))
		if m.code != 0 || m.rss > zarfHostileMaxRSS {
			t.Fatalf("exit %d, peak RSS %d MiB (budget %d MiB): %s", m.code, m.rss>>20, zarfHostileMaxRSS>>20, m.stderr)
		}
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
