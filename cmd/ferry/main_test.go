package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
)

// ferryBin is the ferry binary built once for the tests that check exit
// codes, as `make build` installs it: the front binary, with the full one
// (ferry-full) and the SBOM helper (ferry-sbom) beside it, so that every
// command runs the way a user's does.
var ferryBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ferryBin = filepath.Join(dir, "ferry")
	for _, b := range [][]string{{"-o", filepath.Join(dir, "ferry-full"), "."}, {"-o", ferryBin, "./front"}} {
		if out, err := exec.Command("go", append([]string{"build"}, b...)...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build ferry %v: %v\n%s", b, err, out)
			os.Exit(1)
		}
	}
	// create's SBOMs are made by the ferry-sbom helper beside ferry-full.
	if _, err := sbomexectest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runFerry runs the binary and returns stdout, stderr and the exit code.
func runFerry(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	return runFerryEnv(t, dir, nil, args...)
}

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const goodDef = "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: cli\n  version: 0.1.0\ncomponents:\n  - name: c\n    manifests:\n      - name: m\n        files: [m.yaml]\n    files:\n      - source: f.txt\n        target: /f.txt\n"

func TestCLICreateInspect(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), goodDef)
	writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
	writeFile(t, filepath.Join(dir, "f.txt"), "hello\n")
	out, stderr, code := runFerry(t, dir, "package", "create", "-o", "json")
	if code != 0 {
		t.Fatalf("create exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"path": "cli-0.1.0.tar.zst"`) {
		t.Fatalf("create printed %q / %q", out, stderr)
	}
	// With -o json, stderr carries progress for tools: a JSON object a line.
	writes := 0
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var ev struct{ Event, Phase, Digest string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Event != "progress" {
			t.Fatalf("stderr line %q is not a JSON progress event (%v)", line, err)
		}
		if ev.Phase == "write" && ev.Digest != "" {
			writes++
		}
	}
	if writes == 0 {
		t.Errorf("no write progress events on stderr: %q", stderr)
	}
	out, stderr, code = runFerry(t, dir, "package", "inspect", "cli-0.1.0.tar.zst")
	if code != 0 || !strings.Contains(out, "cli 0.1.0") || !strings.Contains(out, "/f.txt") {
		t.Fatalf("inspect exit %d: %s %s", code, out, stderr)
	}
}

// TestCLIBadInput: bad input gives one line on stderr naming the thing, exit
// 1, and no file written.
func TestCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad", "ferry.yaml"), strings.Replace(goodDef, "  name: cli\n", "  name: cli\n  colour: red\n", 1))
	writeFile(t, filepath.Join(dir, "esc", "ferry.yaml"), strings.Replace(goodDef, "source: f.txt", "source: ../../etc/passwd", 1))
	writeFile(t, filepath.Join(dir, "garbage.tar.zst"), "not an archive at all")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown field", []string{"package", "create", "bad", "-f", "x.tar.zst"}, "ferry: bad/ferry.yaml:5: metadata.colour: unknown field"},
		{"escaping path", []string{"package", "create", "esc", "-f", "x.tar.zst"}, "ferry: esc/ferry.yaml:12: components[0].files[0].source: path \"../../etc/passwd\" escapes the definition's folder"},
		{"missing definition", []string{"package", "create", "nowhere", "-f", "x.tar.zst"}, "ferry: read definition: nowhere does not exist"},
		{"garbage archive", []string{"package", "inspect", "garbage.tar.zst"}, "ferry: garbage.tar.zst: package is corrupt"},
		{"missing archive", []string{"package", "inspect", "nope.tar.zst"}, "ferry: nope.tar.zst: no such file or directory"},
		{"bad output flag", []string{"package", "inspect", "garbage.tar.zst", "-o", "yaml"}, "ferry: -o/--output must be text or json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadDir(dir)
			stdout, stderr, code := runFerry(t, dir, tt.args...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if !strings.HasPrefix(stderr, tt.want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
				t.Errorf("stderr %q (stdout %q), want one line starting %q", stderr, stdout, tt.want)
			}
			after, _ := os.ReadDir(dir)
			if len(after) != len(before) {
				t.Errorf("files before %d, after %d: something was left behind", len(before), len(after))
			}
		})
	}
}
