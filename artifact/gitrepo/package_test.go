package gitrepo

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v6/plumbing/transport"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// gitServer serves the repository folder dir over git's smart HTTP
// (Debian's git http-backend) behind Basic auth user:pass; it returns the
// repository's URL.
func gitServer(t *testing.T, dir, user, pass string) string {
	t.Helper()
	backend := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend", Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(dir), "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(dir)
}

// gitDefinition writes a ferry.yaml carrying a local clone of dir (as
// https://git.example.com/org/fleet.git, at main, with history) and the
// repository at url (at the tag v1, tree only).
func gitDefinition(t *testing.T, dir, url string) *definition.Definition {
	t.Helper()
	defDir := t.TempDir()
	gitRun(t, "", "clone", "-q", dir, filepath.Join(defDir, "fleet"))
	yaml := `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: gitops, version: 1.0.0}
components:
  - name: fleet
    repositories:
      - {url: "https://git.example.com/org/fleet.git", path: fleet, ref: main}
      - {url: "` + url + `", ref: v1, history: false}
`
	if err := os.WriteFile(filepath.Join(defDir, "ferry.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	def, err := definition.Load(defDir)
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// A package carries git repositories at the commits create resolved, as
// Flux OCIRepository artifacts inside the signed graph: ferry.json records
// them, inspect checks them, a damaged one is refused, the same inputs
// give the same package, and after a mirror `oras` reads each artifact in
// Flux's format, field by field.
func TestPackage(t *testing.T) {
	ctx := context.Background()
	dir, first, second := repo(t)
	url := gitServer(t, dir, "fleet", "s3cret")
	netrc := filepath.Join(t.TempDir(), "netrc")
	if err := os.WriteFile(netrc, []byte("machine 127.0.0.1\n  login fleet\n  password s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETRC", netrc)
	def := gitDefinition(t, dir, url)

	var roots []string
	var cfg *artifact.Config
	var pkg string
	for i := range 2 {
		pkg = filepath.Join(t.TempDir(), "gitops.tar")
		res, err := build.Create(ctx, def, build.CreateOptions{Output: pkg, Git: Fetcher{}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		roots, cfg = append(roots, res.Root.Digest.String()), res.Config
	}
	if roots[0] != roots[1] {
		t.Errorf("the same definition created twice: roots %s and %s", roots[0], roots[1])
	}
	repos := cfg.Components[0].Repositories
	if len(repos) != 2 {
		t.Fatalf("ferry.json repositories: %+v", repos)
	}
	want := []artifact.Repository{
		{URL: "https://git.example.com/org/fleet.git", Key: "git.example.com/org/fleet", Path: "org/fleet", Source: "fleet",
			Ref: "refs/heads/main", Commit: second, Revision: "main@sha1:" + second, History: true},
		{URL: url, Key: Key(url), Path: RepositoryPath(url), Ref: "refs/tags/v1", Commit: first, Revision: "v1@sha1:" + first},
	}
	for i, g := range repos {
		w := want[i]
		w.Digest, w.Size = g.Digest, g.Size
		if g != w || g.Size <= 0 {
			t.Errorf("repository %d: %+v, want %+v", i, g, w)
		}
	}

	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := artifact.Inspect(ctx, r, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TotalSize != repos[0].Size+repos[1].Size {
		t.Errorf("inspect counts %d bytes of content, want the repositories' %d", rep.TotalSize, repos[0].Size+repos[1].Size)
	}

	// Mirrored: each artifact under its path, by digest, in Flux's format.
	host := registrytest.New(t)
	mres, err := artifact.Mirror(ctx, r, host, artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(mres.Repositories) != 2 || mres.Repositories[0].Repository != "org/fleet" || mres.Repositories[0].Digest != repos[0].Digest.String() {
		t.Fatalf("mirrored repositories: %+v", mres.Repositories)
	}
	oras := peertool.Require(t, "oras")
	for i, g := range repos {
		ref := host + "/" + g.Path + "@" + g.Digest.String()
		out, err := exec.Command(oras, "manifest", "fetch", "--plain-http", ref).Output()
		if err != nil {
			t.Fatalf("oras manifest fetch %s: %v", ref, err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		layers := 1
		if g.History {
			layers = 2
		}
		if m.MediaType != ocispec.MediaTypeImageManifest || m.ArtifactType != "" || m.Config.MediaType != ConfigMediaType ||
			len(m.Layers) != layers || m.Layers[0].MediaType != ContentMediaType ||
			m.Annotations[ocispec.AnnotationSource] != g.URL || m.Annotations[ocispec.AnnotationRevision] != g.Revision ||
			m.Annotations[ocispec.AnnotationCreated] != "2026-01-02T03:04:05Z" {
			t.Errorf("repository %d: manifest is not Flux's OCIRepository format: %s", i, out)
		}
		tree := filepath.Join(t.TempDir(), "tree.tgz")
		if out, err := exec.Command(oras, "blob", "fetch", "--plain-http", "--output", tree, host+"/"+g.Path+"@"+m.Layers[0].Digest.String()).CombinedOutput(); err != nil {
			t.Fatalf("oras blob fetch: %v: %s", err, out)
		}
		listing, err := exec.Command("tar", "-tzvf", tree).Output()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(listing), "apps/web/deploy.yaml") || (i == 0) != strings.Contains(string(listing), "bin/sync.sh") {
			t.Errorf("repository %d: tree at %s:\n%s", i, g.Revision, listing)
		}
	}

	// A damaged artifact is refused before anything trusts it.
	b, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	off, size, name, err := fixture.LargestTarEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	b[off+size/2] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.tar")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	br, err := artifact.Open(ctx, bad)
	if err == nil {
		_, err = artifact.Inspect(ctx, br, "", nil)
	}
	if !errors.Is(err, artifact.ErrCorrupt) {
		t.Errorf("package with %s damaged: %v, want ErrCorrupt", name, err)
	}
}

// Credentials for an HTTPS repository: none → one clear line; git's
// credential helper (store, in a config of the test's own) → cloned, and
// the helper is told they worked; wrong ones → refused, and the helper
// told to forget them.
func TestCredentials(t *testing.T) {
	ctx := context.Background()
	dir, _, second := repo(t)
	url := gitServer(t, dir, "fleet", "s3cret")
	t.Setenv("NETRC", filepath.Join(t.TempDir(), "none"))
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", home)
	store := filepath.Join(home, "store")
	gitcfg := filepath.Join(home, "gitconfig")
	t.Setenv("GIT_CONFIG_GLOBAL", gitcfg)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	src := definition.Repository{URL: url, Ref: "main"}
	fetch := func() (artifact.Repository, error) {
		rec, _, err := Fetcher{}.FetchGit(ctx, src, nil, memory.New())
		return rec, err
	}

	if _, err := fetch(); !errors.Is(err, transport.ErrAuthenticationRequired) || !strings.Contains(err.Error(), "credential helper") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("no credentials: %v, want transport.ErrAuthenticationRequired, one line about credentials", err)
	}
	gitRun(t, "", "config", "--global", "credential.helper", "store --file="+store)
	if err := os.WriteFile(store, []byte("http://fleet:wrong@127.0.0.1:"+portOf(url)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(); !errors.Is(err, transport.ErrAuthorizationFailed) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("wrong credentials from the helper: %v", err)
	}
	if b, _ := os.ReadFile(store); strings.Contains(string(b), "wrong") {
		t.Errorf("the helper still stores the refused credentials: %s", b)
	}
	if err := os.WriteFile(store, []byte("http://fleet:s3cret@127.0.0.1:"+portOf(url)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := fetch()
	if err != nil {
		t.Fatal(err)
	}
	if rec.Commit != second || strings.Contains(rec.URL, "s3cret") {
		t.Errorf("fetched %+v", rec)
	}
}

// portOf is the port of an http://127.0.0.1:PORT/… URL.
func portOf(u string) string {
	rest := strings.TrimPrefix(u, "http://127.0.0.1:")
	port, _, _ := strings.Cut(rest, "/")
	return port
}

// One repository however spelled is carried once; without a fetcher a
// definition with repositories fails naming the entry.
func TestPackageRefusals(t *testing.T) {
	ctx := context.Background()
	dir, _, _ := repo(t)
	defDir := t.TempDir()
	gitRun(t, "", "clone", "-q", dir, filepath.Join(defDir, "fleet"))
	yaml := `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: gitops, version: 1.0.0}
components:
  - name: fleet
    repositories:
      - {url: "https://git.example.com/org/fleet.git", path: fleet}
  - name: again
    repositories:
      - {url: "git@git.example.com:org/fleet", path: fleet, ref: dev}
`
	def, err := definition.Parse(filepath.Join(defDir, "ferry.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	def.Dir = defDir
	out := filepath.Join(t.TempDir(), "x.tar")
	_, err = build.Create(ctx, def, build.CreateOptions{Output: out, Git: Fetcher{}})
	var de *definition.Error
	if !errors.As(err, &de) || de.Line != 10 || !strings.Contains(err.Error(), "is the same as https://git.example.com/org/fleet.git") {
		t.Errorf("the same repository twice: %v", err)
	}
	if _, err := build.Create(ctx, def, build.CreateOptions{Output: out}); !errors.As(err, &de) || !strings.Contains(err.Error(), "git fetcher") {
		t.Errorf("no fetcher: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed create left %s", out)
	}
}

// A repository larger than a manifest goes through temporary files (the
// clone on disk, the tree and history spooled), all removed afterwards,
// and the package holds it intact.
func TestPackageLarge(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := filepath.Join(t.TempDir(), "big")
	big := make([]byte, 6<<20)
	_, _ = crand.Read(big) // incompressible

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "init", "-q", "-b", "main")
	gitRun(t, dir, "add", ".")
	gitRun(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "big")
	url := gitServer(t, dir, "u", "p")
	netrc := filepath.Join(t.TempDir(), "netrc")
	if err := os.WriteFile(netrc, []byte("machine 127.0.0.1 login u password p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETRC", netrc)
	defDir := t.TempDir()
	yaml := `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: big, version: 1.0.0}
components:
  - name: c
    repositories:
      - {url: "` + url + `"}
`
	def, err := definition.Parse(filepath.Join(defDir, "ferry.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	def.Dir = defDir
	pkg := filepath.Join(t.TempDir(), "big.tar")
	res, err := build.Create(ctx, def, build.CreateOptions{Output: pkg, Git: Fetcher{}})
	if err != nil {
		t.Fatal(err)
	}
	if g := res.Config.Components[0].Repositories[0]; g.Size < 2*(6<<20) {
		t.Errorf("repository of %d bytes, want tree and history of the 6 MiB file", g.Size)
	}
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Inspect(ctx, r, "", nil); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "ferry-") {
			t.Errorf("left in TMPDIR: %s", e.Name())
		}
	}
}
