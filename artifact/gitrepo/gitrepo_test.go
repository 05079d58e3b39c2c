package gitrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// repo makes a git repository with Debian's git: two commits on main (the
// second adds an executable, a symbolic link and a .gitignore), an
// annotated tag v1 on the first, a branch dev; it returns its folder and
// the two commits.
func repo(t *testing.T) (dir, first, second string) {
	t.Helper()
	gitBin := peertool.Require(t, "git")
	dir = t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, data string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q", "-b", "main")
	write("apps/web/kustomization.yaml", "resources: [deploy.yaml]\n", 0o644)
	write("apps/web/deploy.yaml", "kind: Deployment\n", 0o644)
	write("README.md", "fleet\n", 0o644)
	run("add", ".")
	run("commit", "-q", "-m", "first")
	first = run("rev-parse", "HEAD")
	run("tag", "-a", "v1", "-m", "release 1")
	run("branch", "dev")
	write("bin/sync.sh", "#!/bin/sh\n", 0o755)
	write(".gitignore", "*.tmp\n", 0o644)
	if err := os.Symlink("README.md", filepath.Join(dir, "LINK")); err != nil {
		t.Fatal(err)
	}
	run("add", ".")
	run("commit", "-q", "-m", "second")
	second = run("rev-parse", "HEAD")
	return dir, first, second
}

func TestResolve(t *testing.T) {
	dir, first, second := repo(t)
	r, err := Open(context.Background(), Source{URL: "https://git.example/org/fleet.git", Path: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]struct{ ref, commit, revision string }{
		"":                  {"refs/heads/main", second, "main@sha1:" + second},
		"main":              {"refs/heads/main", second, "main@sha1:" + second},
		"dev":               {"refs/heads/dev", first, "dev@sha1:" + first},
		"v1":                {"refs/tags/v1", first, "v1@sha1:" + first},
		"refs/tags/v1":      {"refs/tags/v1", first, "v1@sha1:" + first},
		first:               {"", first, "sha1:" + first},
		"refs/heads/main~0": {}, // not a ref
		first[:7]:           {}, // abbreviated
		"nope":              {},
	} {
		res, err := Resolve(r, Source{URL: "https://user@git.example/org/fleet.git", Ref: ref})
		if want.commit == "" {
			if !errors.Is(err, ErrRef) {
				t.Errorf("ref %q: %+v, %v; want ErrRef", ref, res, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ref %q: %v", ref, err)
			continue
		}
		if res.Ref != want.ref || res.Commit != want.commit || res.Revision != want.revision || res.URL != "https://git.example/org/fleet.git" || res.Created.Year() != 2026 {
			t.Errorf("ref %q: %+v, want %+v", ref, res, want)
		}
	}
	if _, err := Resolve(r, Source{URL: "https://u:secret@git.example/x.git"}); !errors.Is(err, ErrCredential) || strings.Contains(err.Error(), "secret") {
		t.Errorf("a URL with a password: %v", err)
	}
}

// The artifact is Flux's format, its tree is the commit's (no symbolic
// link, no .gitignore, modes kept), and the same commit gives the same
// digest, from a local clone and from a clone over git's smart HTTP
// (Debian's git http-backend).
func TestBuild(t *testing.T) {
	ctx := context.Background()
	dir, _, second := repo(t)
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("%s: %v (Debian's git)", backend, err)
	}
	parent := filepath.Dir(dir)
	srv := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + parent, "GIT_HTTP_EXPORT_ALL=1"}})
	defer srv.Close()
	url := srv.URL + "/" + filepath.Base(dir)

	var digests []string
	for _, src := range []Source{{URL: "https://git.example/org/fleet.git", Path: dir}, {URL: url, CloneDir: t.TempDir()}} {
		r, err := Open(ctx, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Resolve(r, Source{URL: "https://git.example/org/fleet.git", Ref: "main"})
		if err != nil {
			t.Fatal(err)
		}
		store := memory.New()
		desc, err := Build(ctx, r, res, true, store)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, desc.Digest.String())
		b, err := content.FetchAll(ctx, store, desc)
		if err != nil {
			t.Fatal(err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Config.MediaType != ConfigMediaType || len(m.Layers) != 2 || m.Layers[0].MediaType != ContentMediaType || m.Layers[1].MediaType != BundleMediaType {
			t.Fatalf("manifest: %s", b)
		}
		for k, v := range map[string]string{
			ocispec.AnnotationSource: "https://git.example/org/fleet.git", ocispec.AnnotationRevision: "main@sha1:" + second,
			ocispec.AnnotationCreated: "2026-01-02T03:04:05Z",
		} {
			if m.Annotations[k] != v {
				t.Errorf("annotation %s: %q, want %q", k, m.Annotations[k], v)
			}
		}
		layer, err := content.FetchAll(ctx, store, m.Layers[0])
		if err != nil {
			t.Fatal(err)
		}
		files := untar(t, layer)
		want := map[string]string{
			"apps/": "dir 755", "apps/web/": "dir 755", "apps/web/deploy.yaml": "644 kind: Deployment\n",
			"apps/web/kustomization.yaml": "644 resources: [deploy.yaml]\n", "bin/": "dir 755", "bin/sync.sh": "755 #!/bin/sh\n",
			"README.md": "644 fleet\n",
		}
		if len(files) != len(want) {
			t.Errorf("tree: %v, want %v", files, want)
		}
		for k, v := range want {
			if files[k] != v {
				t.Errorf("%s: %q, want %q", k, files[k], v)
			}
		}
		// The history: a bundle git verifies and clones at the commit.
		bundle, err := content.FetchAll(ctx, store, m.Layers[1])
		if err != nil {
			t.Fatal(err)
		}
		bf := filepath.Join(t.TempDir(), "fleet.bundle")
		if err := os.WriteFile(bf, bundle, 0o644); err != nil {
			t.Fatal(err)
		}
		gitRun(t, "", "bundle", "verify", bf)
		clone := filepath.Join(t.TempDir(), "clone")
		gitRun(t, "", "clone", "-q", bf, clone)
		if head := gitRun(t, clone, "rev-parse", "HEAD"); head != second {
			t.Errorf("clone of the bundle: HEAD %s, want %s", head, second)
		}
		if branch := gitRun(t, clone, "rev-parse", "--abbrev-ref", "HEAD"); branch != "main" {
			t.Errorf("clone of the bundle is on %q, want main", branch)
		}
		gitRun(t, clone, "fsck", "--strict")
	}
	if digests[0] != digests[1] {
		t.Errorf("the same commit built twice: %s and %s", digests[0], digests[1])
	}
	t.Logf("artifact %s", digests[0])
}

// untar reads a gzip tar: name → "dir MODE" or "MODE content".
func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.IsZero() && h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out[h.Name] = "dir " + fmt.Sprintf("%o", h.Mode)
		case tar.TypeReg:
			data, _ := io.ReadAll(tr)
			out[h.Name] = fmt.Sprintf("%o", h.Mode) + " " + string(data)
		default:
			t.Errorf("%s: type %c", h.Name, h.Typeflag)
		}
	}
}

// gitRun runs Debian's git in dir and returns its trimmed output.
func gitRun(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(peertool.Require(t, "git"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// An annotated tag travels as itself: the bundle names the tag object, and
// a clone of it peels to the tagged commit.
func TestBundleTag(t *testing.T) {
	dir, first, _ := repo(t)
	r, err := Open(context.Background(), Source{URL: "https://git.example/org/fleet.git", Path: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(r, Source{URL: "https://git.example/org/fleet.git", Ref: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	bf := filepath.Join(t.TempDir(), "v1.bundle")
	f, err := os.Create(bf)
	if err != nil {
		t.Fatal(err)
	}
	if err := Bundle(f, r, res); err != nil {
		t.Fatal(err)
	}
	f.Close()
	heads := gitRun(t, "", "bundle", "list-heads", bf)
	tagObj := gitRun(t, dir, "rev-parse", "refs/tags/v1")
	if !strings.Contains(heads, tagObj+" refs/tags/v1") || !strings.Contains(heads, first+" HEAD") {
		t.Fatalf("bundle heads:\n%s\nwant the tag object %s and HEAD %s", heads, tagObj, first)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	gitRun(t, "", "clone", "-q", bf, clone)
	if got := gitRun(t, clone, "rev-parse", "v1^{commit}"); got != first {
		t.Errorf("v1 in the clone: %s, want %s", got, first)
	}
}

func TestKey(t *testing.T) {
	for _, u := range []string{
		"https://github.com/org/fleet.git", "https://GitHub.com/org/fleet", "https://user@github.com:443/org/fleet/",
		"ssh://git@github.com:22/org/fleet.git", "git@github.com:org/fleet.git", "github.com:org/fleet",
	} {
		if k := Key(u); k != "github.com/org/fleet" {
			t.Errorf("Key(%q) = %q", u, k)
		}
		if p := RepositoryPath(u); p != "org/fleet" {
			t.Errorf("RepositoryPath(%q) = %q", u, p)
		}
	}
	for u, want := range map[string]string{
		"http://git.local:8080/a/B.git": "git.local:8080/a/B", "repos/fleet": "repos/fleet", "/srv/git/x.git/": "srv/git/x",
	} {
		if k := Key(u); k != want {
			t.Errorf("Key(%q) = %q, want %q", u, k, want)
		}
	}
}
