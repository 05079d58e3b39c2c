package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestReadVersion: the version, commit and build are read back from a
// binary's file as each kind of build leaves them (the Go build ID's stamp
// of `make build` and `make dist`, for Linux and macOS; the -ldflags a build
// without -trimpath records), and a file that is not ferry is refused.
func TestReadVersion(t *testing.T) {
	src := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module github.com/ferrypkg/ferry\n\ngo 1.24\n")
	write("cmd/ferry/main.go", "package main\n\nfunc main() {}\n")
	write("other/main.go", "package main\n\nfunc main() {}\n")
	build := func(goos, pkg string, flags ...string) string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "bin")
		cmd := exec.Command("go", append(append([]string{"build", "-buildvcs=false"}, flags...), "-o", out, pkg)...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build: %v: %s", err, b)
		}
		return out
	}
	const x = "-X " + versionPkg + "version=v1.2.3 -X " + versionPkg + "commit=c0ffee -X '" + versionPkg + "build=b1'"
	for _, c := range []struct {
		name, goos string
		flags      []string
		want       VersionInfo
	}{
		{"make build", "linux", []string{"-trimpath", "-ldflags", "-s -w " + x + " -buildid=ferry:v1.2.3:c0ffee:b1"}, VersionInfo{Version: "v1.2.3", Commit: "c0ffee", Build: "b1", Platform: "linux/amd64"}},
		{"make dist for macOS", "darwin", []string{"-trimpath", "-ldflags", "-s -w " + x + " -buildid=ferry:v1.2.3:c0ffee:b1"}, VersionInfo{Version: "v1.2.3", Commit: "c0ffee", Build: "b1", Platform: "darwin/amd64"}},
		{"no version", "linux", []string{"-trimpath", "-ldflags", "-buildid=ferry::c0ffee:b1"}, VersionInfo{Version: "(devel)", Commit: "c0ffee", Build: "b1", Platform: "linux/amd64"}},
		{"without -trimpath", "linux", []string{"-ldflags", x}, VersionInfo{Version: "v1.2.3", Commit: "c0ffee", Build: "b1", Platform: "linux/amd64"}},
		{"go build", "linux", nil, VersionInfo{Version: "(devel)", Platform: "linux/amd64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadVersion(build(c.goos, "./cmd/ferry", c.flags...), FullPackage)
			if err != nil {
				t.Fatal(err)
			}
			c.want.GoVersion = runtime.Version()
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}

	script := filepath.Join(t.TempDir(), "ferry-full")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{script, build("linux", "./other"), t.TempDir(), "/dev/zero"} {
		if _, err := ReadVersion(path, FullPackage); !errors.Is(err, ErrNotFerry) {
			t.Errorf("%s: %v, want ErrNotFerry", path, err)
		}
	}
}
