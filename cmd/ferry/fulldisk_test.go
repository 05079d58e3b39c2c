package main

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/tmpfs"
)

// TestCLIDiskFull: each command that writes a package (create, pull,
// split, delta) and registry load, given a file system too
// small for what it writes, exits 1 with one line naming the path and the
// file system's free space, and leaves nothing on it.
func TestCLIDiskFull(t *testing.T) {
	dir := splitPackageDir(t) // an image and 5 MiB of random bytes
	ok := func(env []string, args ...string) {
		t.Helper()
		if _, stderr, code := runFerryEnv(t, dir, env, args...); code != 0 {
			t.Fatalf("ferry %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
	ok(nil, "package", "create", "-f", "v1.tar.zst", "--sbom=false")
	url, _ := serveForTest(t, registryServeOptions{})
	host := strings.TrimPrefix(url, "http://")
	ok(nil, "package", "push", "v1.tar.zst", host+"/dvd:0.1.0")
	// A second version whose 5 MiB file is new: its delta against the
	// first carries it.
	big := make([]byte, 5<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	ok(nil, "package", "create", "-f", "v2.tar.zst", "--sbom=false")

	const size = 2 << 20
	for _, tc := range []struct {
		name string
		env  func(full string) []string
		args func(full string) []string
		want func(full string) string
	}{
		{"create", nil,
			func(full string) []string {
				return []string{"package", "create", "-f", filepath.Join(full, "c.tar.zst"), "--sbom=false"}
			},
			func(full string) string { return "write " + filepath.Join(full, "c.tar.zst") + ": file system full (" }},
		{"pull", nil,
			func(full string) []string {
				return []string{"package", "pull", host + "/dvd:0.1.0", "-f", filepath.Join(full, "p.tar.zst")}
			},
			func(full string) string { return "write " + filepath.Join(full, "p.tar.zst") + ": file system full (" }},
		{"split", nil,
			func(full string) []string {
				return []string{"package", "split", "v1.tar.zst", "--size", "1MiB", "-f", filepath.Join(full, "s")}
			},
			func(full string) string { return "write " + filepath.Join(full, "s.part") }},
		{"delta", nil,
			func(full string) []string {
				return []string{"package", "delta", "v2.tar.zst", "--have", "v1.tar.zst", "-f", filepath.Join(full, "d.tar.zst")}
			},
			func(full string) string { return "write " + filepath.Join(full, "d.tar.zst") + ": file system full (" }},
		{"registry load", nil,
			func(full string) []string {
				return []string{"registry", "load", "v1.tar.zst", "--root", filepath.Join(full, "registry")}
			},
			func(full string) string { return "registry storage full: " }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := tmpfs.Mount(t, size)
			var env []string
			if tc.env != nil {
				env = tc.env(full)
			}
			stdout, stderr, code := runFerryEnv(t, dir, env, tc.args(full)...)
			t.Logf("%s", strings.TrimSpace(stderr))
			wantFail(t, stdout, stderr, code, tc.want(full))
			if !strings.Contains(stderr, "free of 2.0 MiB") {
				t.Errorf("%q does not name the file system's free space", stderr)
			}
			var left []string
			filepath.WalkDir(full, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					left = append(left, p)
				}
				return nil
			})
			if tc.name != "registry load" && len(left) != 0 {
				t.Errorf("left on the full file system: %v", left)
			}
		})
	}
}
