// Package zarftest makes real Zarf v0.60.0 packages for tests: a zarf.yaml
// with an image, a local chart, a manifest, a file and a git repository,
// built by the zarf binary, then converted + created and imported into
// ferry packages. artifact/zarf's TestZarfInterop and e2e's TestZarfDeploy
// share it.
package zarftest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// Bin is Zarf v0.60.0 as e2e/zarf/build.sh builds it (in
// $FERRY_E2E_CACHE/bin, default ~/.cache/ferry-e2e/bin), else on PATH.
// Missing, the test is skipped, or fails with FERRY_REQUIRE_ZARF=1 (`make
// interop-zarf` builds it and sets that). Not FERRY_REQUIRE_TOOLS: building
// Zarf (Helm, cosign, Syft, client-go) takes longer than the whole of `make
// test` on a fresh 2-core machine.
func Bin(t testing.TB) string {
	t.Helper()
	cache := os.Getenv("FERRY_E2E_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ferry-e2e")
	}
	if p := filepath.Join(cache, "bin", "zarf"); fileExists(p) {
		return p
	}
	if p := peertool.Find("zarf"); p != "" {
		return p
	}
	if os.Getenv("FERRY_REQUIRE_ZARF") == "1" {
		t.Fatal("zarf not built: run e2e/zarf/build.sh (Zarf v0.60.0 into ~/.cache/ferry-e2e/bin)")
	}
	t.Skip("zarf not built: `make interop-zarf` builds it and runs this test (FERRY_REQUIRE_ZARF=1 turns this skip into a failure)")
	return ""
}

func fileExists(p string) bool { fi, err := os.Stat(p); return err == nil && fi.Mode().IsRegular() }

// GitRepo makes a repository with a tag v1.0.0 and serves it over git's
// smart HTTP (Debian's git http-backend) until t ends; it returns its URL
// and the tag's commit.
func GitRepo(t testing.TB) (url, commit string) {
	t.Helper()
	gitBin := peertool.Require(t, "git")
	parent := t.TempDir()
	dir := filepath.Join(parent, "fleet.git")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
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
	run("init", "-q", "-b", "main")
	WriteFile(t, filepath.Join(dir, "README.md"), "fleet\n")
	run("add", ".")
	run("commit", "-q", "-m", "first")
	run("tag", "v1.0.0")
	commit = run("rev-parse", "HEAD")
	backend := "/usr/lib/git-core/git-http-backend"
	if !fileExists(backend) {
		t.Fatalf("%s missing (Debian's git)", backend)
	}
	srv := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + parent, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv.URL + "/fleet.git", commit
}

// Source is what Make puts in the zarf.yaml: one required component "web"
// with Image, the local chart web 0.1.0 (release web, a Deployment "web" of
// Image), the manifest manifests/deploy.yaml (a Deployment "worker" of
// Image), the file files/app.conf (target /etc/app.conf) and a git
// repository at its tag v1.0.0.
type Source struct {
	// Image is the image's reference; zarf package create pulls it over
	// plain HTTP.
	Image string
	// Name is the package's metadata.name; "shop" if empty.
	Name string
	// Namespace is the chart's and the manifest's; "shop" if empty.
	Namespace string
	// Replicas of each Deployment; 1 if 0.
	Replicas int
	// Port, if set, is the container port both Deployments declare and
	// their readiness probe (HTTP GET /) asks.
	Port int
}

// Package is a Zarf package Make built.
type Package struct {
	Source
	// Src is the folder of the zarf.yaml and what it names.
	Src string
	// Built is the package zarf package create wrote
	// (zarf-package-NAME-ARCH-1.0.0.tar.zst), signed by Zarf with a key
	// ferry made; PublicKey is its public half's file.
	Built, PublicKey string
	// Arch is the package's architecture: the host's.
	Arch string
	// Commit is the repository's tag's commit.
	Commit string

	dir string
}

// Make writes Source's zarf.yaml and runs zarf package create (offline,
// SBOMs included, signed) on it with the zarf binary zarfPath.
func Make(t testing.TB, zarfPath string, s Source) *Package {
	t.Helper()
	if s.Name == "" {
		s.Name = "shop"
	}
	if s.Namespace == "" {
		s.Namespace = "shop"
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	dir := t.TempDir()
	p := &Package{Source: s, Src: filepath.Join(dir, "src"), Arch: runtime.GOARCH, dir: dir}
	gitURL, commit := GitRepo(t)
	p.Commit = commit

	WriteFile(t, filepath.Join(p.Src, "web", "Chart.yaml"), "apiVersion: v2\nname: web\nversion: 0.1.0\nappVersion: \"1.0\"\ndescription: A generated chart for tests\ntype: application\n")
	WriteFile(t, filepath.Join(p.Src, "web", "values.yaml"), fmt.Sprintf("image: %s\nreplicas: %d\n", s.Image, s.Replicas))
	WriteFile(t, filepath.Join(p.Src, "web", "templates", "deployment.yaml"), deployment("{{ .Release.Name }}", "{{ .Values.replicas }}", "{{ .Values.image }}", s.Port))
	WriteFile(t, filepath.Join(p.Src, "manifests", "deploy.yaml"), deployment("worker", fmt.Sprint(s.Replicas), s.Image, s.Port))
	WriteFile(t, filepath.Join(p.Src, "files", "app.conf"), "a=1\n")
	WriteFile(t, filepath.Join(p.Src, "zarf.yaml"), fmt.Sprintf(`kind: ZarfPackageConfig
metadata:
  name: %[1]s
  version: 1.0.0
components:
  - name: web
    required: true
    images:
      - %[2]s
    charts:
      - name: web
        localPath: web
        version: 0.1.0
        namespace: %[3]s
    manifests:
      - name: worker
        namespace: %[3]s
        files:
          - manifests/deploy.yaml
    files:
      - source: files/app.conf
        target: /etc/app.conf
    repos:
      - %[4]s@v1.0.0
`, s.Name, s.Image, s.Namespace, gitURL))

	// Zarf's own key, made by ferry (cosign's format), signs the package.
	pair, err := key.Generate([]byte("zarfpw"))
	if err != nil {
		t.Fatal(err)
	}
	zkey := filepath.Join(dir, "zarf.key")
	p.PublicKey = filepath.Join(dir, "zarf.pub")
	if err := pair.WriteFiles(zkey, p.PublicKey); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(zarfPath, "package", "create", p.Src, "--confirm", "--plain-http", "-a", p.Arch,
		"-o", out, "--zarf-cache", filepath.Join(dir, "cache"), "--tmpdir", t.TempDir(), "--signing-key", zkey, "--signing-key-pass", "zarfpw", "--log-format", "console", "--no-color")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zarf package create: %v\n%s", err, b)
	}
	p.Built = filepath.Join(out, fmt.Sprintf("zarf-package-%s-%s-1.0.0.tar.zst", s.Name, p.Arch))
	return p
}

// deployment is a Deployment manifest (or chart template) of image.
func deployment(name, replicas, image string, port int) string {
	s := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]s
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
        - name: app
          image: %[3]s
`, name, replicas, image)
	if port != 0 {
		s += fmt.Sprintf(`          ports:
            - containerPort: %[1]d
          readinessProbe:
            httpGet: {path: /, port: %[1]d}
            periodSeconds: 1
`, port)
	}
	return s
}

// Convert converts p's zarf.yaml (convert) and creates a ferry package from
// it with opts (Charts and Git filled in when unset), as `ferry convert`
// then `ferry create` do.
func (p *Package) Convert(ctx context.Context, t testing.TB, opts build.CreateOptions) (*zarf.Result, *build.CreateResult) {
	t.Helper()
	file := filepath.Join(p.Src, "zarf.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := zarf.Convert(file, data, zarf.ConvertOptions{Architecture: p.Arch})
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, filepath.Join(p.Src, "ferry.yaml"), string(res.Definition))
	def, err := definition.Load(p.Src)
	if err != nil {
		t.Fatal(err)
	}
	created, err := build.Create(ctx, def, withSources(opts))
	if err != nil {
		t.Fatal(err)
	}
	return res, created
}

// Imported is a built Zarf package imported into a ferry package.
type Imported struct {
	// Zarf is the extracted package (Zarf's signature checked).
	Zarf *zarf.Package
	// Result is what import made of it; Created the ferry package.
	Result  *zarf.Result
	Created *build.CreateResult
}

// Import extracts p.Built (its signature verified with p.PublicKey), imports
// it and creates a ferry package with opts (Charts, Git and Zarf's SBOMs
// filled in), as `ferry import` does.
func (p *Package) Import(ctx context.Context, t testing.TB, opts build.CreateOptions) *Imported {
	t.Helper()
	pub, err := artifact.LoadPublicKey(p.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := zarf.Extract(p.Built, filepath.Join(t.TempDir(), "x"), pub)
	if err != nil {
		t.Fatal(err)
	}
	res, err := zarf.Import(pkg)
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, filepath.Join(pkg.Dir, "ferry.yaml"), string(res.Definition))
	def, err := definition.Load(pkg.Dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Definition)
	}
	opts = withSources(opts)
	if opts.SBOM == nil {
		opts.SBOM = zarf.SBOMs{Images: res.SBOMs}
	}
	created, err := build.Create(ctx, def, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &Imported{Zarf: pkg, Result: res, Created: created}
}

func withSources(opts build.CreateOptions) build.CreateOptions {
	if opts.Charts == nil {
		opts.Charts = chart.Packager{}
	}
	if opts.Git == nil {
		opts.Git = gitrepo.Fetcher{}
	}
	return opts
}

// ImageDigest is the manifest digest Zarf's own record of the images of an
// extracted package names, its OCI layout's images/index.json: the one
// `zarf package deploy` pushes. It fails t unless there is exactly one.
func ImageDigest(t testing.TB, pkg *zarf.Package) string {
	t.Helper()
	var index struct {
		Manifests []struct {
			Digest string `json:"digest"`
		} `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(pkg.Dir, "images", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("Zarf's images/index.json: %s (%v)", b, err)
	}
	return index.Manifests[0].Digest
}

// WriteFile writes body to p, making its folders.
func WriteFile(t testing.TB, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
