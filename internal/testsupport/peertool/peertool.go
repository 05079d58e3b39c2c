// Package peertool finds the real peer clients (helm, crane, regctl, oras,
// skopeo, cosign, docker-registry) that interop tests drive.
//
// A test asks for a tool with Require. When FERRY_REQUIRE_TOOLS=1 (as
// `make test` and CI set it) a missing tool fails the test; otherwise the test
// is skipped with a message saying how to install the tool, so `go test ./...`
// stays usable on a bare machine without ever passing vacuously in CI.
package peertool

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Require returns the absolute path of the named tool, looking first in the
// repository's .bin/ (where `make tools` builds the pinned versions) and then
// on PATH.
func Require(t testing.TB, name string) string {
	t.Helper()
	if p := Find(name); p != "" {
		return p
	}
	if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
		t.Fatalf("peer tool %q not found in .bin/ or PATH (run `make deps`)", name)
	}
	t.Skipf("peer tool %q not installed; run `make deps` (FERRY_REQUIRE_TOOLS=1 turns this skip into a failure)", name)
	return ""
}

// Find returns the path of the named tool, or "" when it is not installed.
func Find(name string) string {
	if root := repoRoot(); root != "" {
		p := filepath.Join(root, ".bin", name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// repoRoot is the folder holding the main go.mod, found from this source file.
func repoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}
