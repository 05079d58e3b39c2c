package gitserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gitv5 "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/opencontainers/go-digest"
	"golang.org/x/crypto/bcrypt"

	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/deploy/gitserver"
)

const (
	testURL  = "https://git.example.com/org/fleet.git"
	testKey  = "git.example.com/org/fleet"
	testUser = "ferry"
	testPass = "s3cret"
)

// gitBin is Debian's git; the tests need it.
func gitBin(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	return p
}

// git runs git in dir with a clean, prompt-free environment.
func git(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(gitBin(t), args...)
	cmd.Dir = dir
	home := filepath.Join(os.TempDir(), "ferry-gitserver-test-home")
	cmd.Env = append(os.Environ(),
		"HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=",
		"SSH_ASKPASS=", "GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=Test",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_AUTHOR_DATE=2024-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z",
		"LC_ALL=C",
	)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

func mustGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := git(t, dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// source is a repository made with Debian's git: two commits on main
// (nested directories, an executable file) and an annotated tag v1 on the
// second.
type source struct {
	dir              string
	first, second    string // commits
	tagObject        string
	firstTree, files string
}

func makeSource(t testing.TB) source {
	t.Helper()
	dir := t.TempDir()
	mustGit(t, dir, "init", "-q", "-b", "main")
	write := func(name, body string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "fleet\n", 0o644)
	write("clusters/prod/apps/kustomization.yaml", "resources: []\n", 0o644)
	mustGit(t, dir, "add", "-A")
	mustGit(t, dir, "commit", "-q", "-m", "first")
	s := source{dir: dir, first: mustGit(t, dir, "rev-parse", "HEAD")}
	write("scripts/deploy.sh", "#!/bin/sh\necho deploy\n", 0o755)
	write("clusters/prod/apps/app.yaml", "kind: ConfigMap\n", 0o644)
	mustGit(t, dir, "add", "-A")
	mustGit(t, dir, "commit", "-q", "-m", "second")
	s.second = mustGit(t, dir, "rev-parse", "HEAD")
	mustGit(t, dir, "tag", "-a", "-m", "release v1", "v1")
	s.tagObject = mustGit(t, dir, "rev-parse", "v1")
	s.files = mustGit(t, dir, "ls-tree", "-r", "HEAD")
	return s
}

// carried is a repository as a package carries it: the bundle gitrepo
// makes for ref, and the Repo a Lookup returns for it.
func carried(t testing.TB, src source, ref string) (*gitserver.Repo, *atomic.Int32) {
	t.Helper()
	r, err := gitrepo.Open(context.Background(), gitrepo.Source{URL: testURL, Path: src.dir, Ref: ref}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := gitrepo.Resolve(r, gitrepo.Source{URL: testURL, Path: src.dir, Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := gitrepo.Bundle(&b, r, res); err != nil {
		t.Fatal(err)
	}
	return repoOf(res.Ref, res.Commit, b.Bytes())
}

func repoOf(ref, commit string, bundle []byte) (*gitserver.Repo, *atomic.Int32) {
	var opens atomic.Int32
	return &gitserver.Repo{
		Key: testKey, URL: testURL, Ref: ref, Commit: commit, BundleDigest: digest.FromBytes(bundle),
		Bundle: func(context.Context) (io.ReadCloser, error) {
			opens.Add(1)
			return io.NopCloser(bytes.NewReader(bundle)), nil
		},
	}, &opens
}

func lookupOf(repos ...*gitserver.Repo) gitserver.Lookup {
	return func(_ context.Context, key string) (*gitserver.Repo, error) {
		for _, r := range repos {
			if r.Key == key {
				return r, nil
			}
		}
		return nil, fmt.Errorf("%s: %w", key, gitserver.ErrNotFound)
	}
}

// serve runs a Server behind httptest, with Basic auth against an
// htpasswd file holding testUser:testPass, and returns the repository's
// URL with and without those credentials.
func serve(t testing.TB, lookup gitserver.Lookup, opts ...gitserver.Option) (withCreds, bare string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(testPass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(testUser+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testLog{t}, nil))
	srv, err := gitserver.New(lookup, append([]gitserver.Option{gitserver.WithAuth(gitserver.HtpasswdFile(htpasswd, 0)), gitserver.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	host := strings.TrimPrefix(ts.URL, "http://")
	return "http://" + testUser + ":" + testPass + "@" + host + "/" + testKey + ".git", "http://" + host + "/" + testKey + ".git"
}

// testLog sends the server's log to the test's.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestCloneDebianGit: Debian's git clones the carried repository, whole
// and shallow, over protocol v0, v1 and v2, for a branch, an annotated tag
// and a bare commit; the work tree is the commit's.
func TestCloneDebianGit(t *testing.T) {
	src := makeSource(t)
	for _, c := range []struct {
		name, ref, wantRef string
		commit             string
	}{
		{"branch", "main", "refs/heads/main", src.second},
		{"tag", "v1", "refs/tags/v1", src.second},
		{"commit", src.first, "", src.first},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo, opens := carried(t, src, c.ref)
			if repo.Ref != c.wantRef || repo.Commit != c.commit {
				t.Fatalf("carried %s at %s, want %s at %s", repo.Ref, repo.Commit, c.wantRef, c.commit)
			}
			url, _ := serve(t, lookupOf(repo))
			for _, proto := range []string{"0", "1", "2"} {
				for _, depth := range []string{"", "1"} {
					name := "v" + proto + "/full"
					args := []string{"-c", "protocol.version=" + proto, "clone", "-q"}
					if depth != "" {
						name = "v" + proto + "/depth" + depth
						args = append(args, "--depth", depth)
					}
					t.Run(name, func(t *testing.T) {
						dst := filepath.Join(t.TempDir(), "clone")
						start := time.Now()
						mustGit(t, "", append(args, url, dst)...)
						t.Logf("clone took %s", time.Since(start))
						if got := mustGit(t, dst, "rev-parse", "HEAD"); got != c.commit {
							t.Errorf("HEAD = %s, want %s", got, c.commit)
						}
						if c.commit == src.second {
							if got := mustGit(t, dst, "ls-tree", "-r", "HEAD"); got != src.files {
								t.Errorf("tree:\n%s\nwant:\n%s", got, src.files)
							}
							fi, err := os.Stat(filepath.Join(dst, "scripts/deploy.sh"))
							if err != nil || fi.Mode()&0o100 == 0 {
								t.Errorf("scripts/deploy.sh: %v, mode %v: want executable", err, fi.Mode())
							}
						}
						// (go-git marks a root commit shallow too, where git
						// does not: harmless, so only the second is checked.)
						shallow := mustGit(t, dst, "rev-parse", "--is-shallow-repository")
						if want := fmt.Sprint(depth != ""); c.commit == src.second && shallow != want {
							t.Errorf("shallow = %s, want %s", shallow, want)
						}
						if n := mustGit(t, dst, "rev-list", "--count", "HEAD"); c.commit == src.second && n != map[string]string{"": "2", "1": "1"}[depth] {
							t.Errorf("%s commits in the clone", n)
						}
						mustGit(t, dst, "fsck", "--no-progress")
					})
				}
			}
			if n := opens.Load(); n != 1 {
				t.Errorf("bundle opened %d times for 6 clones, want 1 (indexed once)", n)
			}
		})
	}
}

// TestLsRemote: only HEAD and the carried ref are advertised, whatever
// else the source repository had (another branch, another tag).
func TestLsRemote(t *testing.T) {
	src := makeSource(t)
	mustGit(t, src.dir, "branch", "other", src.first)
	mustGit(t, src.dir, "tag", "old", src.first)
	for _, c := range []struct{ ref, want string }{
		{"main", src.second + "\tHEAD\n" + src.second + "\trefs/heads/main"},
		{"v1", src.second + "\tHEAD\n" + src.tagObject + "\trefs/tags/v1\n" + src.second + "\trefs/tags/v1^{}"},
		{src.first, src.first + "\tHEAD"},
	} {
		repo, _ := carried(t, src, c.ref)
		url, _ := serve(t, lookupOf(repo))
		for _, proto := range []string{"0", "2"} {
			t.Run(c.ref+"/v"+proto, func(t *testing.T) {
				got := mustGit(t, "", "-c", "protocol.version="+proto, "ls-remote", url)
				if got != c.want {
					t.Errorf("ls-remote:\n%s\nwant:\n%s", got, c.want)
				}
			})
		}
		if c.ref == "main" {
			t.Run("symref", func(t *testing.T) {
				got := mustGit(t, "", "-c", "protocol.version=2", "ls-remote", "--symref", url, "HEAD")
				if !strings.Contains(got, "ref: refs/heads/main\tHEAD") {
					t.Errorf("ls-remote --symref:\n%s\nwant HEAD → refs/heads/main", got)
				}
			})
		}
	}
}

// TestPushRefused: a push gets 403 and the repository is unchanged.
func TestPushRefused(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	url, _ := serve(t, lookupOf(repo))
	dst := filepath.Join(t.TempDir(), "clone")
	mustGit(t, "", "clone", "-q", url, dst)
	mustGit(t, dst, "commit", "-q", "--allow-empty", "-m", "third")
	_, err := git(t, dst, "push", "origin", "main")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("push: %v, want a 403 refusal", err)
	}
	if got := mustGit(t, "", "ls-remote", url, "refs/heads/main"); !strings.HasPrefix(got, src.second) {
		t.Errorf("after the refused push: %s", got)
	}
}

// TestAuth: no credentials, a wrong password or an unknown user get 401
// with a Basic challenge; Debian's git gives up.
func TestAuth(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	_, bare := serve(t, lookupOf(repo))
	host := strings.TrimPrefix(bare, "http://")
	for name, url := range map[string]string{
		"none":         bare,
		"wrong":        "http://" + testUser + ":nope@" + host,
		"unknown user": "http://someone:" + testPass + "@" + host,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := git(t, "", "clone", "-q", url, filepath.Join(t.TempDir(), "c"))
			if err == nil {
				t.Fatal("clone succeeded")
			}
			if !strings.Contains(err.Error(), "Authentication failed") && !strings.Contains(err.Error(), "could not read Username") {
				t.Errorf("clone: %v, want an authentication failure", err)
			}
			resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Basic realm="ferry git"`) {
				t.Errorf("info/refs: %s, WWW-Authenticate %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
}

// TestGoGitV5Shallow: Flux's path — go-git v5 with Depth 1 — clones the
// branch and gets the commit.
func TestGoGitV5Shallow(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	_, bare := serve(t, lookupOf(repo))
	for _, depth := range []int{1, 0} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			r, err := gitv5.CloneContext(context.Background(), memory.NewStorage(), nil, &gitv5.CloneOptions{
				URL: bare, Auth: &githttp.BasicAuth{Username: testUser, Password: testPass},
				ReferenceName: plumbing.ReferenceName("refs/heads/main"), SingleBranch: true, Depth: depth, NoCheckout: true,
				Tags: gitv5.NoTags,
			})
			if err != nil {
				t.Fatal(err)
			}
			head, err := r.Head()
			if err != nil {
				t.Fatal(err)
			}
			if head.Hash().String() != src.second {
				t.Errorf("HEAD = %s, want %s", head.Hash(), src.second)
			}
			c, err := r.CommitObject(head.Hash())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.File("scripts/deploy.sh"); err != nil {
				t.Errorf("scripts/deploy.sh: %v", err)
			}
			if _, err := r.CommitObject(plumbing.NewHash(src.first)); (err == nil) != (depth == 0) {
				t.Logf("first commit present in a depth-%d clone: %v", depth, err == nil)
			}
		})
	}
}

// TestRoutes: what is not upload-pack is refused, before any lookup.
func TestRoutes(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	var lookups atomic.Int32
	lookup := func(ctx context.Context, key string) (*gitserver.Repo, error) {
		lookups.Add(1)
		return lookupOf(repo)(ctx, key)
	}
	url, _ := serve(t, lookup)
	for _, c := range []struct {
		method, path string
		code         int
		looksUp      bool
	}{
		{"GET", "/info/refs?service=git-upload-pack", 200, true},
		{"GET", "/info/refs?service=git-receive-pack", 403, false},
		{"POST", "/git-receive-pack", 403, false},
		{"GET", "/info/refs", 404, false},          // dumb protocol
		{"GET", "/HEAD", 404, false},               // dumb protocol
		{"GET", "/objects/info/packs", 404, false}, // dumb protocol
		{"POST", "/git-upload-archive", 404, false},
		{"POST", "/info/refs?service=git-upload-pack", 405, false},
		{"GET", "/git-upload-pack", 405, false},
		{"POST", "/git-upload-pack", 415, false}, // no git content type: refused as git's http-backend does
	} {
		t.Run(c.method+c.path, func(t *testing.T) {
			before := lookups.Load()
			req, _ := http.NewRequest(c.method, url+c.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Errorf("%s: %s %q, want %d", c.path, resp.Status, body, c.code)
			}
			if got := lookups.Load() > before; got != c.looksUp {
				t.Errorf("looked up: %v, want %v", got, c.looksUp)
			}
		})
	}
	host := url[:strings.Index(url, "/"+testKey)]
	for path, code := range map[string]int{
		"/healthz": 200, "/nope.git/info/refs?service=git-upload-pack": 404,
		"/other.example.com/x/y.git/info/refs?service=git-upload-pack":            404,
		"/git.example.com/org/../org/fleet.git/info/refs?service=git-upload-pack": 404,
		"/git.example.com/org/fleet/info/refs?service=git-upload-pack":            200, // without .git
	} {
		resp, err := http.Get(host + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("%s: %s, want %d", path, resp.Status, code)
		}
	}
	// /healthz needs no credentials.
	resp, err := http.Get("http://" + host[strings.Index(host, "@")+1:] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz without credentials: %s", resp.Status)
	}
}

// TestBundleRefused: a bundle that does not hold what the package recorded
// is never served.
func TestBundleRefused(t *testing.T) {
	src := makeSource(t)
	good, _ := carried(t, src, "main")
	var bundle bytes.Buffer
	rc, _ := good.Bundle(context.Background())
	io.Copy(&bundle, rc)
	b := bundle.Bytes()
	for name, repo := range map[string]*gitserver.Repo{
		"other commit": func() *gitserver.Repo { r, _ := repoOf("refs/heads/main", src.first, b); return r }(),
		"other ref":    func() *gitserver.Repo { r, _ := repoOf("refs/heads/dev", src.second, b); return r }(),
		"digest": func() *gitserver.Repo {
			r, _ := repoOf("refs/heads/main", src.second, b)
			r.BundleDigest = digest.FromString("other")
			return r
		}(),
		"truncated": func() *gitserver.Repo { r, _ := repoOf("refs/heads/main", src.second, b[:len(b)-30]); return r }(),
		"not a bundle": func() *gitserver.Repo {
			r, _ := repoOf("refs/heads/main", src.second, []byte("PACK"))
			return r
		}(),
		"prerequisite": func() *gitserver.Repo {
			r, _ := repoOf("refs/heads/main", src.second, []byte("# v2 git bundle\n-"+src.first+" first\n"+src.second+" refs/heads/main\n\nPACK"))
			return r
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			url, _ := serve(t, lookupOf(repo))
			resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("%s, want 502", resp.Status)
			}
		})
	}
}

// TestCacheDir: with a cache directory, the index outlives the server: a
// new one on the same directory serves without opening the bundle.
func TestCacheDir(t *testing.T) {
	src := makeSource(t)
	dir := t.TempDir()
	for i, want := range []int32{1, 0} {
		repo, opens := carried(t, src, "v1")
		url, _ := serve(t, lookupOf(repo), gitserver.WithCacheDir(dir))
		dst := filepath.Join(t.TempDir(), "clone")
		mustGit(t, "", "clone", "-q", "--depth", "1", url, dst)
		if got := mustGit(t, dst, "rev-parse", "HEAD"); got != src.second {
			t.Errorf("server %d: HEAD = %s", i, got)
		}
		if got := opens.Load(); got != want {
			t.Errorf("server %d: bundle opened %d times, want %d", i, got, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("cache directory holds %d entries, want 1", len(entries))
	}
}

// TestNew: options are validated.
func TestNew(t *testing.T) {
	lookup := lookupOf()
	for name, opt := range map[string]gitserver.Option{
		"nil auth": gitserver.WithAuth(nil), "realm": gitserver.WithRealm(`a"b`), "cache dir": gitserver.WithCacheDir(""),
		"max": gitserver.WithMaxRequestBytes(0), "timeout": gitserver.WithTimeout(-1), "logger": gitserver.WithLogger(nil),
	} {
		if _, err := gitserver.New(lookup, opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := gitserver.New(nil); err == nil {
		t.Error("nil lookup: no error")
	}
	if !errors.Is(fmt.Errorf("x: %w", gitserver.ErrNotFound), gitserver.ErrNotFound) {
		t.Fatal("unreachable")
	}
}
