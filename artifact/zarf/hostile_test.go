package zarf_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/artifact/zarf/zarftest"
	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// hostileBudget is how long convert or import may take to refuse any
// hostile input of issue 49 (they take milliseconds; a hang is caught).
const hostileBudget = 10 * time.Second

// maxErrorLine bounds a refusal's length: a value quoted in it is cut at
// zarf.MaxQuoted bytes, a whole message at 4 times that, plus the paths
// of the test's folders.
const maxErrorLine = 4*zarf.MaxQuoted + 512

// refusal runs f within hostileBudget and checks that it fails with one
// short line matching h.Want that holds nothing of the file outside.
func refusal(t *testing.T, h zarftest.Hostile, f func() error) time.Duration {
	t.Helper()
	budget := max(hostileBudget, h.Budget)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(budget):
		t.Fatalf("not refused within %v", budget)
	}
	took := time.Since(start)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	if !regexp.MustCompile(h.Want).MatchString(msg) || strings.Contains(msg, "\n") || len(msg) > maxErrorLine {
		t.Fatalf("error (%d bytes) %.2000q, want one line of at most %d bytes matching %q", len(msg), msg, maxErrorLine, h.Want)
	}
	if strings.Contains(msg, h.Secret) || regexp.MustCompile(`\b(open|stat|lstat|read)at\b`).MatchString(msg) {
		t.Errorf("error %q holds the outside file's text or a system call", msg)
	}
	t.Logf("refused in %v: %s", took.Round(time.Millisecond), msg)
	return took
}

// Every hostile zarf.yaml of issue 49 is refused in one line, quickly,
// without reading outside its folder.
func TestHostileConvert(t *testing.T) {
	dir := t.TempDir()
	for _, h := range zarftest.HostileDefinitions(t, dir) {
		t.Run(h.Name, func(t *testing.T) {
			file := filepath.Join(h.Path, "zarf.yaml")
			var res *zarf.Result
			refusal(t, h, func() error {
				data, err := zarf.ReadDefinition(file)
				if err != nil {
					return err
				}
				res, err = zarf.Convert(file, data, zarf.ConvertOptions{Architecture: "amd64"})
				return err
			})
			if res != nil {
				t.Errorf("a result with the error: %d gaps", len(res.Gaps))
			}
		})
	}
}

// Every hostile built package of issue 49 is refused in one line, quickly;
// a multi-part package refused for its parts has had nothing written.
func TestHostileImport(t *testing.T) {
	dir := t.TempDir()
	for _, h := range zarftest.HostilePackages(t, filepath.Join(dir, "in")) {
		t.Run(h.Name, func(t *testing.T) {
			out := filepath.Join(dir, "out", strings.ReplaceAll(h.Name, " ", "-"))
			refusal(t, h, func() error {
				p, err := zarf.Extract(h.Path, out, nil)
				if err != nil {
					return err
				}
				_, err = zarf.Import(p)
				return err
			})
			if strings.HasSuffix(h.Path, ".part000") {
				if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("something was written before the parts were checked: %v", err)
				}
			}
		})
	}
}

// A FIFO or a device named as the zarf.yaml is refused without blocking.
func TestReadDefinitionRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "zarf.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", dir} {
		h := zarftest.Hostile{Name: p, Want: "is not a regular file", Secret: "\x00"}
		refusal(t, h, func() error { _, err := zarf.ReadDefinition(p); return err })
	}
}

// The largest definition the limits let through converts: MaxComponents
// components of a few images each.
func TestConvertLargest(t *testing.T) {
	dir := t.TempDir()
	zarftest.WriteFile(t, filepath.Join(dir, "zarf.yaml"), zarftest.Largest())
	start := time.Now()
	res, def := convertDir(t, dir, zarf.ConvertOptions{Architecture: "amd64"})
	if len(def.Components) != zarf.MaxComponents || len(res.Definition) > 4<<20 {
		t.Fatalf("%d components, a definition of %d bytes", len(def.Components), len(res.Definition))
	}
	t.Logf("%d components converted in %v (%d gaps, %d KiB of ferry.yaml)", len(def.Components), time.Since(start).Round(time.Millisecond), len(res.Gaps), len(res.Definition)>>10)
}

// The limits let real definitions through: every zarf.yaml of Zarf's
// examples is far below them (testdata's and the fixtures').
func TestLimitsAboveReal(t *testing.T) {
	data, err := os.ReadFile("testdata/full/zarf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if bound, n := yamlbound.Bound(data); bound*50 > zarf.MaxNodes {
		t.Errorf("testdata/full/zarf.yaml: %d indicators, a bound of %d nodes: within 50× of %d", n, bound, zarf.MaxNodes)
	}
}
