package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFrontLinksNoHeavyLibrary: the front binary links none of the
// libraries whose initialisation costs ~0.1 s and ~50 MiB at every start
// (issue 15, item 13); a package that starts importing one of them breaks
// this test, not the start-up budget a month later.
func TestFrontLinksNoHeavyLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./front").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/sigstore/cosign/", "helm.sh/", "k8s.io/", "github.com/distribution/distribution/", "github.com/aws/aws-sdk-go", "github.com/sigstore/rekor/", "github.com/sigstore/sigstore-go/", "github.com/google/go-containerregistry/pkg/v1"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("the front binary links %s", dep)
			}
		}
	}
}

// TestFrontHandsOff: the front runs its own commands without the full
// binary, hands every other one to it (exit code and output its own), and
// says what is missing, in one line, when the full binary is not there.
func TestFrontHandsOff(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runFerry(t, dir, "version")
	if code != 0 || !strings.HasPrefix(stdout, "ferry ") {
		t.Fatalf("version: exit %d, %q %q", code, stdout, stderr)
	}
	// --help of the whole tree comes from the full binary: every command.
	stdout, _, code = runFerry(t, dir, "--help")
	if code != 0 || !strings.Contains(stdout, "deploy") || !strings.Contains(stdout, "init") {
		t.Fatalf("--help: exit %d, %q", code, stdout)
	}
	stdout, _, code = runFerry(t, dir, "package", "--help")
	if code != 0 || !strings.Contains(stdout, "create") || !strings.Contains(stdout, "push") {
		t.Fatalf("package --help: exit %d, %q", code, stdout)
	}

	// Alone, the front still runs its own commands.
	alone := filepath.Join(t.TempDir(), "ferry")
	data, err := os.ReadFile(ferryBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		return runBinary(t, alone, dir, []string{"PATH=/usr/bin:/bin"}, "", args...)
	}
	if stdout, stderr, code := run("version"); code != 0 || !strings.HasPrefix(stdout, "ferry ") {
		t.Fatalf("version without ferry-full: exit %d, %q %q", code, stdout, stderr)
	}
	stdout, stderr, code = run("package", "create", ".")
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "ferry-full") {
		t.Fatalf("create without ferry-full: exit %d, stdout %q, stderr %q; want one line naming ferry-full", code, stdout, stderr)
	}
	// verify is the front's own, but not with --images (sigstore-go).
	stdout, stderr, code = run("package", "verify", "x.tar.zst", "--key", "k.pub", "--images")
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "ferry-full") {
		t.Fatalf("verify --images without ferry-full: exit %d, stdout %q, stderr %q; want one line naming ferry-full", code, stdout, stderr)
	}
}

// TestFrontRefusesOtherBuild: beside a ferry-full of another build, the
// front refuses to hand a command over, in one line naming both builds,
// and `version` reports both.
func TestFrontRefusesOtherBuild(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	front, err := os.ReadFile(ferryBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ferry"), front, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-ldflags", "-X github.com/ferrypkg/ferry/cmd/ferry/internal/cli.build=stale", "-o", filepath.Join(bin, "ferry-full"), ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	run := func(args ...string) (string, string, int) {
		return runBinary(t, filepath.Join(bin, "ferry"), dir, []string{"PATH=/usr/bin:/bin"}, "", args...)
	}
	stdout, stderr, code := run("package", "create", ".")
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "another build") || !strings.Contains(stderr, "stale") {
		t.Fatalf("create with a ferry-full of another build: exit %d, %q %q", code, stdout, stderr)
	}
	stdout, _, code = run("version")
	if code != 0 || !strings.Contains(stdout, "ferry-full: ") || !strings.Contains(stdout, "another build") {
		t.Fatalf("version: exit %d, %q; want the front's and the full binary's", code, stdout)
	}
}

// TestFrontChecksFull: the front reads the build of the ferry-full it is
// about to run from the file (as `make build` stamps it: -trimpath, the
// version, commit and build in the Go build ID) and runs only ferry's full
// binary of its own build. Every impostor here, run, would leave a marker
// file: a shell script, another Go program, ferry of another build or of
// none, and a FIFO on PATH (refused without blocking).
func TestFrontChecksFull(t *testing.T) {
	const pkg = "github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	stamp := func(build string) string {
		return "-X " + pkg + ".version=v9.9.9 -X " + pkg + ".commit=c0ffee -X " + pkg + ".build=" + build + " -buildid=ferry:v9.9.9:c0ffee:" + build
	}
	goBuild := func(dir, out string, flags ...string) {
		t.Helper()
		cmd := exec.Command("go", append(append([]string{"build", "-buildvcs=false"}, flags...), "-o", out, ".")...)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v: %s", out, err, b)
		}
	}
	bin := t.TempDir()
	goBuild("front", filepath.Join(bin, "ferry"), "-trimpath", "-ldflags", stamp("same"))

	// Stand-ins that leave $FERRY_TEST_MARKER when run: one claims to be
	// ferry's full binary (its module and package), one does not.
	const main = "package main\n\nimport \"os\"\n\nfunc main() { os.WriteFile(os.Getenv(\"FERRY_TEST_MARKER\"), []byte(\"ran\"), 0o644) }\n"
	impostor := t.TempDir()
	writeFile(t, filepath.Join(impostor, "go.mod"), "module github.com/ferrypkg/ferry\n\ngo 1.24\n")
	writeFile(t, filepath.Join(impostor, "cmd", "ferry", "main.go"), main)
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "go.mod"), "module example.com/other\n\ngo 1.24\n")
	writeFile(t, filepath.Join(other, "main.go"), main)

	full := filepath.Join(bin, "ferry-full")
	for _, c := range []struct {
		name, want string // want: what the refusal says
		make       func()
	}{
		{"shell script", "not a Go program", func() { writeFile(t, full, "#!/bin/sh\necho ran > \"$FERRY_TEST_MARKER\"\n"); os.Chmod(full, 0o755) }},
		{"another Go program", "built from example.com/other", func() { goBuild(other, full, "-trimpath") }},
		{"ferry of another build", "another build", func() {
			goBuild(filepath.Join(impostor, "cmd", "ferry"), full, "-trimpath", "-ldflags", stamp("other"))
		}},
		{"ferry of no build", "another build", func() { goBuild(filepath.Join(impostor, "cmd", "ferry"), full, "-trimpath") }},
		{"ferry of this build", "", func() { goBuild(filepath.Join(impostor, "cmd", "ferry"), full, "-trimpath", "-ldflags", stamp("same")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(full)
			c.make()
			marker := filepath.Join(t.TempDir(), "ran")
			run := func(args ...string) (string, string, int) {
				return runBinary(t, filepath.Join(bin, "ferry"), t.TempDir(), []string{"PATH=/usr/bin:/bin", "FERRY_TEST_MARKER=" + marker}, "", args...)
			}
			stdout, stderr, code := run("package", "create", ".")
			_, err := os.Stat(marker)
			if c.want == "" {
				if code != 0 || err != nil {
					t.Fatalf("ferry-full of this build not run: exit %d, %q, marker: %v", code, stderr, err)
				}
				if stdout, _, _ := run("version"); !strings.Contains(stdout, "ferry-full v9.9.9 (commit c0ffee") {
					t.Errorf("version: %q, want ferry-full's read from the file", stdout)
				}
				return
			}
			if err == nil {
				t.Fatal("the front ran it")
			}
			if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, full) || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want one line naming %s and saying %q", code, stdout, stderr, full, c.want)
			}
			stdout, _, code = run("version")
			if _, err := os.Stat(marker); err == nil || code != 0 || !strings.Contains(stdout, "ferry-full: "+full) || !strings.Contains(stdout, c.want) {
				t.Fatalf("version: exit %d, %q (marker: %v); want ferry-full refused, not run", code, stdout, err)
			}
		})
	}

	// A FIFO named ferry-full on PATH (exec.LookPath takes any file with
	// an executable bit): refused, without blocking on it.
	t.Run("FIFO on PATH", func(t *testing.T) {
		alone, path := t.TempDir(), t.TempDir()
		front, err := os.ReadFile(filepath.Join(bin, "ferry"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(alone, "ferry"), front, 0o755); err != nil {
			t.Fatal(err)
		}
		fifo := filepath.Join(path, "ferry-full")
		if err := syscall.Mkfifo(fifo, 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(alone, "ferry"), "package", "create", ".")
		cmd.Env = append(os.Environ(), "PATH="+path+":/usr/bin:/bin")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil || err == nil || !strings.Contains(string(out), fifo+": not a ferry binary: not a regular file") {
			t.Fatalf("%v (%v): %q; want a one-line refusal naming the FIFO", err, ctx.Err(), out)
		}
	})
}

// TestUnknownCommandRefused: a command that does not exist is refused in
// one line with exit 1, --help or not; help and completion still work.
func TestUnknownCommandRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"frobnicate", "--help"}, {"frobnicate"}, {"package", "frobnicate", "-h"}, {"registry", "nope"}} {
		stdout, stderr, code := runFerry(t, dir, args...)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "unknown command") {
			t.Errorf("%v: exit %d, %q %q; want one line, exit 1", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "package"}, {"completion", "bash"}, {"package", "--help"}} {
		if _, stderr, code := runFerry(t, dir, args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

// TestShellCompletion: `ferry completion bash` prints a script, and the
// requests it makes (__complete, through the front binary to the full
// one) list commands and flags; the unknown-command guard lets them by.
func TestShellCompletion(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runFerry(t, dir, "completion", "bash")
	if code != 0 || !strings.Contains(out, "__start_ferry") {
		t.Fatalf("completion bash: exit %d: %s", code, errOut)
	}
	out, errOut, code = runFerry(t, dir, "__complete", "package", "")
	if code != 0 {
		t.Fatalf("__complete package: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"create", "push", "pull", "sign", "verify"} {
		if !strings.Contains(out, want) {
			t.Errorf("__complete package: no %q in %q", want, out)
		}
	}
	out, errOut, code = runFerry(t, dir, "__complete", "deploy", "--")
	if code != 0 || !strings.Contains(out, "--key") || !strings.Contains(out, "--registry-via") {
		t.Fatalf("__complete deploy --: exit %d: %q %s", code, out, errOut)
	}
}
