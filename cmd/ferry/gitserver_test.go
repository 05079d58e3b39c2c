package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/deploy/gitserver"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestGitServerRepos: `ferry git-server --repos` serves a repository whose
// git artifact was pushed to a registry: Debian's git clones it shallow
// with the htpasswd's credentials, and is refused without them.
func TestGitServerRepos(t *testing.T) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	ctx := context.Background()
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.com")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitPath, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	src := t.TempDir()
	git(src, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(src, "apps/app.yaml"), "kind: ConfigMap\n")
	git(src, "add", "-A")
	git(src, "commit", "-q", "-m", "one")
	writeFile(t, filepath.Join(src, "README.md"), "fleet\n")
	git(src, "add", "-A")
	git(src, "commit", "-q", "-m", "two")
	commit := git(src, "rev-parse", "HEAD")

	// The artifact, pushed as deploy pushes it: by digest, untagged.
	const url = "https://git.example.com/org/fleet.git"
	s := gitrepo.Source{URL: url, Path: src, Ref: "main"}
	r, err := gitrepo.Open(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := gitrepo.Resolve(r, s)
	if err != nil {
		t.Fatal(err)
	}
	host := registrytest.New(t)
	dst, err := remote.NewRepository(host + "/" + gitrepo.RepositoryPath(url))
	if err != nil {
		t.Fatal(err)
	}
	dst.PlainHTTP = true
	desc, err := gitrepo.Build(ctx, r, res, true, dst)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	repos := filepath.Join(dir, "repos.json")
	b, _ := json.Marshal([]gitserver.Entry{{URL: url, Ref: res.Ref, Commit: res.Commit, Repository: gitrepo.RepositoryPath(url), Digest: desc.Digest}})
	writeFile(t, repos, string(b))
	hash, _ := bcrypt.GenerateFromPassword([]byte("pa55"), bcrypt.MinCost)
	htpasswd := filepath.Join(dir, "htpasswd")
	writeFile(t, htpasswd, "bob:"+string(hash)+"\n")

	base, stop := runGitServerForTest(t, "--addr", "127.0.0.1:0", "--htpasswd", htpasswd, "--repos", repos,
		"--registry", host, "--plain-http", "--cache-dir", filepath.Join(dir, "cache"))
	authed := strings.Replace(base, "http://", "http://bob:pa55@", 1) + "/git.example.com/org/fleet.git"
	clone := filepath.Join(t.TempDir(), "clone")
	start := time.Now()
	git("", "clone", "-q", "--depth", "1", authed, clone)
	t.Logf("first clone (fetch, index, pack): %s", time.Since(start))
	if got := git(clone, "rev-parse", "HEAD"); got != commit {
		t.Errorf("HEAD = %s, want %s", got, commit)
	}
	if got := git("", "ls-remote", authed); got != commit+"\tHEAD\n"+commit+"\trefs/heads/main" {
		t.Errorf("ls-remote:\n%s", got)
	}
	resp, err := http.Get(base + "/git.example.com/org/fleet.git/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without credentials: %s", resp.Status)
	}
	if err := stop(); err != nil {
		t.Errorf("git-server: %v", err)
	}

	// Without --cache-dir: the index is a temporary directory, removed
	// when the server stops.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	base, stop = runGitServerForTest(t, "--addr", "127.0.0.1:0", "--htpasswd", htpasswd, "--repos", repos,
		"--registry", host, "--plain-http")
	authed = strings.Replace(base, "http://", "http://bob:pa55@", 1) + "/git.example.com/org/fleet.git"
	git("", "clone", "-q", authed, filepath.Join(t.TempDir(), "clone2"))
	if m, _ := filepath.Glob(filepath.Join(tmp, "ferry-gitserver-*")); len(m) != 1 {
		t.Errorf("temporary indexes while serving: %v, want one", m)
	}
	if err := stop(); err != nil {
		t.Errorf("git-server: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(tmp, "ferry-gitserver-*")); len(m) != 0 {
		t.Errorf("temporary indexes after the server stopped: %v", m)
	}
}

// TestGitServerFlags: what the command refuses before it serves.
func TestGitServerFlags(t *testing.T) {
	dir := t.TempDir()
	good := `[{"url":"https://h/o/r","commit":"` + strings.Repeat("a", 40) + `","repository":"o/r","digest":"sha256:` + strings.Repeat("b", 64) + `"}]`
	for name, c := range map[string]struct {
		repos string
		args  []string
		want  string
	}{
		"no auth":      {good, []string{"--addr", ":0", "--registry", "r:5000"}, "without authentication"},
		"no registry":  {good, []string{"--addr", "127.0.0.1:0"}, "--registry"},
		"bad commit":   {strings.Replace(good, strings.Repeat("a", 40), "abc", 1), []string{"--addr", "127.0.0.1:0"}, "commit"},
		"bad digest":   {strings.Replace(good, "sha256:", "sha256:x", 1), []string{"--addr", "127.0.0.1:0"}, "digest"},
		"unknown key":  {`[{"uri":"x"}]`, []string{"--addr", "127.0.0.1:0"}, "unknown field"},
		"no htpasswd":  {good, []string{"--addr", "127.0.0.1:0", "--registry", "r:5000", "--htpasswd", filepath.Join(dir, "none")}, "--htpasswd"},
		"missing file": {"", []string{"--addr", "127.0.0.1:0"}, "--repos"},
	} {
		t.Run(name, func(t *testing.T) {
			repos := filepath.Join(t.TempDir(), "repos.json")
			if c.repos != "" {
				writeFile(t, repos, c.repos)
			}
			cmd := newGitServerCmd()
			cmd.SetArgs(append([]string{"--repos", repos}, c.args...))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// runGitServerForTest runs `ferry git-server` in-process and returns its
// base URL and a function that stops it and returns its error.
func runGitServerForTest(t *testing.T, args ...string) (string, func() error) {
	t.Helper()
	return runServerForTest(t, "git-server", func(ctx context.Context, out io.Writer) error {
		cmd := newGitServerCmd()
		cmd.SetArgs(args)
		cmd.SetOut(out)
		cmd.SetErr(io.Discard)
		return cmd.ExecuteContext(ctx)
	})
}
