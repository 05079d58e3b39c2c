package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
