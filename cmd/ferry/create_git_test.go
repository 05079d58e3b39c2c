package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// TestCLIGitRepository: package create carries a local clone at the
// commit its ref names and says so (text and -o json); inspect lists it;
// a URL with a password is one line naming the fix.
func TestCLIGitRepository(t *testing.T) {
	gitBin := peertool.Require(t, "git")
	dir := t.TempDir()
	repo := filepath.Join(dir, "fleet")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	writeFile(t, filepath.Join(repo, "apps", "app.yaml"), "kind: ConfigMap\n")
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	commit := git("rev-parse", "HEAD")
	writeFile(t, filepath.Join(dir, "ferry.yaml"), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: gitops, version: 1.0.0}
components:
  - name: fleet
    repositories:
      - {url: "https://git.example.com/org/fleet.git", path: fleet, ref: main}
`)
	out, stderr, code := runFerry(t, dir, "package", "create", "--format", "tar")
	if code != 0 {
		t.Fatal(stderr)
	}
	if want := "git https://git.example.com/org/fleet.git at main@sha1:" + commit + "\n"; !strings.Contains(out, want) {
		t.Errorf("create printed %q, want %q in it", out, want)
	}
	out, stderr, code = runFerry(t, dir, "package", "create", "--format", "tar", "-o", "json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var res struct {
		Repositories []struct{ URL, Key, Path, Commit, Revision string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Repositories) != 1 || res.Repositories[0].Commit != commit ||
		res.Repositories[0].Path != "org/fleet" || res.Repositories[0].Key != "git.example.com/org/fleet" {
		t.Errorf("create -o json: %s (%v)", out, err)
	}
	out, stderr, code = runFerry(t, dir, "package", "inspect", "gitops-1.0.0.tar")
	if code != 0 {
		t.Fatal(stderr)
	}
	if !strings.Contains(out, "git") || !strings.Contains(out, "main@sha1:"+commit+" (tree and history)") {
		t.Errorf("inspect lacks the repository:\n%s", out)
	}

	writeFile(t, filepath.Join(dir, "ferry.yaml"), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: gitops, version: 1.0.0}
components:
  - name: fleet
    repositories:
      - {url: "https://me:tok3n@git.example.com/org/fleet.git"}
`)
	stdout, stderr, code := runFerry(t, dir, "package", "create")
	wantFail(t, stdout, stderr, code, "carries a password: credentials belong to git's credential helpers or ~/.netrc")
	if strings.Contains(stderr, "tok3n") {
		t.Errorf("the error shows the password: %s", stderr)
	}

	// A token as the user name is allowed (git allows it), and a failed
	// clone does not show it; nor does a URL with a query get through, nor
	// is a password shown in any spelling.
	for url, want := range map[string]string{
		"http://ghp_t0ken@127.0.0.1:1/org/fleet.git": "clone http://xxxxx@127.0.0.1:1/org/fleet.git",
		"git.example.com:org/fleet.git?t0ken=1":      "is not a git URL",
		// scp-like with a password, and a password holding "/" (the
		// URL parser takes the host to end there)
		"me:t0ken@git.example.com:org/fleet.git":           `"xxxxx:xxxxx@git.example.com:org/fleet.git" is not a git URL`,
		"https://me:t0ken/x@git.example.com/org/fleet.git": `"https://xxxxx@git.example.com/org/fleet.git" is not a git URL`,
	} {
		writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: gitops, version: 1.0.0}\ncomponents:\n  - name: fleet\n    repositories:\n      - {url: \""+url+"\"}\n")
		stdout, stderr, code := runFerry(t, dir, "package", "create", "--sbom=false")
		wantFail(t, stdout, stderr, code, want)
		if strings.Contains(stderr, "t0ken") {
			t.Errorf("the error shows the token: %s", stderr)
		}
	}
}
