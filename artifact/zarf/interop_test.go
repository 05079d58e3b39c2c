package zarf_test

import (
	"bytes"
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

	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/internal/fixture"
	"github.com/ferrypkg/ferry/internal/peertool"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// zarfBin is Zarf v0.60.0 as e2e/zarf/build.sh builds it (in
// $FERRY_E2E_CACHE/bin, default ~/.cache/ferry-e2e/bin), else on PATH.
// Missing, the test is skipped, or fails with FERRY_REQUIRE_ZARF=1 (`make
// interop-zarf` builds it and sets that). Not FERRY_REQUIRE_TOOLS: building
// Zarf (Helm, cosign, Syft, client-go) takes longer than the whole of `make
// test` on a fresh 2-core machine.
func zarfBin(t *testing.T) string {
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

// gitRepo makes a repository with a tag v1.0.0 and serves it over git's
// smart HTTP (Debian's git http-backend); it returns its URL and the
// tag's commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	gitBin := peertool.Require(t, "git")
	parent := t.TempDir()
	dir := filepath.Join(parent, "fleet.git")
	os.MkdirAll(dir, 0o755)
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
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("fleet\n"), 0o644)
	run("add", ".")
	run("commit", "-q", "-m", "first")
	run("tag", "v1.0.0")
	commit := run("rev-parse", "HEAD")
	backend := "/usr/lib/git-core/git-http-backend"
	if !fileExists(backend) {
		t.Fatalf("%s missing (Debian's git)", backend)
	}
	srv := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + parent, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv.URL + "/fleet.git", commit
}

// A real Zarf v0.60.0 package, made here from a zarf.yaml with an image of
// a local registry, a chart, manifests, a file and a git repository:
// converting its zarf.yaml and creating, and importing the built package,
// both give ferry packages that carry the image by the digest Zarf carries
// (the one `zarf package deploy` pushes and names), the same manifests,
// file and commit.
func TestZarfInterop(t *testing.T) {
	zarfPath := zarfBin(t)
	ctx := context.Background()
	dir := t.TempDir()
	arch := runtime.GOARCH

	host := registrytest.New(t)
	repo, err := remote.NewRepository(host + "/shop/app")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	img, err := fixture.PushImage(ctx, repo, fixture.Platform("linux", arch, ""), []fixture.Layer{fixture.FileLayer("app", []byte("app\n"), 0o755)})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, img, "1.0"); err != nil {
		t.Fatal(err)
	}
	imageRef := host + "/shop/app:1.0"
	gitURL, commit := gitRepo(t)

	src := filepath.Join(dir, "src")
	if _, err := fixture.Chart(src, "web", "0.1.0", imageRef); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "manifests", "deploy.yaml"), fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker
spec:
  selector:
    matchLabels: {app: worker}
  template:
    metadata:
      labels: {app: worker}
    spec:
      containers:
        - name: worker
          image: %s
`, imageRef))
	writeFile(t, filepath.Join(src, "files", "app.conf"), "a=1\n")
	writeFile(t, filepath.Join(src, "zarf.yaml"), fmt.Sprintf(`kind: ZarfPackageConfig
metadata:
  name: shop
  version: 1.0.0
components:
  - name: web
    required: true
    images:
      - %s
    charts:
      - name: web
        localPath: web
        version: 0.1.0
        namespace: shop
    manifests:
      - name: worker
        namespace: shop
        files:
          - manifests/deploy.yaml
    files:
      - source: files/app.conf
        target: /etc/app.conf
    repos:
      - %s@v1.0.0
`, imageRef, gitURL))

	// Zarf's own key, made by ferry (cosign's format), signs the package.
	pair, err := key.Generate([]byte("zarfpw"))
	if err != nil {
		t.Fatal(err)
	}
	zkey, zpub := filepath.Join(dir, "zarf.key"), filepath.Join(dir, "zarf.pub")
	if err := pair.WriteFiles(zkey, zpub); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.MkdirAll(out, 0o755)
	cmd := exec.Command(zarfPath, "package", "create", src, "--confirm", "--plain-http", "-a", arch,
		"-o", out, "--zarf-cache", filepath.Join(dir, "cache"), "--tmpdir", t.TempDir(), "--signing-key", zkey, "--signing-key-pass", "zarfpw", "--log-format", "console", "--no-color")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zarf package create: %v\n%s", err, b)
	}
	built := filepath.Join(out, fmt.Sprintf("zarf-package-shop-%s-1.0.0.tar.zst", arch))

	// Convert + create.
	data, _ := os.ReadFile(filepath.Join(src, "zarf.yaml"))
	res, err := zarf.Convert(filepath.Join(src, "zarf.yaml"), data, zarf.ConvertOptions{Architecture: arch})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "ferry.yaml"), string(res.Definition))
	def, err := artifact.LoadDefinition(src)
	if err != nil {
		t.Fatal(err)
	}
	converted, err := artifact.Create(ctx, def, artifact.CreateOptions{Output: filepath.Join(dir, "converted.tar.zst"), Charts: chart.Packager{}, Git: gitrepo.Fetcher{}})
	if err != nil {
		t.Fatal(err)
	}

	// Import.
	pub, err := artifact.LoadPublicKey(zpub)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := zarf.Extract(built, filepath.Join(dir, "x"), pub)
	if err != nil {
		t.Fatal(err)
	}
	if !pkg.Verified {
		t.Error("Zarf's signature not verified")
	}
	ires, err := zarf.Import(pkg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(pkg.Dir, "ferry.yaml"), string(ires.Definition))
	idef, err := artifact.LoadDefinition(pkg.Dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, ires.Definition)
	}
	imported, err := artifact.Create(ctx, idef, artifact.CreateOptions{Output: filepath.Join(dir, "imported.tar.zst"), Charts: chart.Packager{}, Git: gitrepo.Fetcher{},
		SBOM: zarf.SBOMs{Images: ires.SBOMs}})
	if err != nil {
		t.Fatal(err)
	}

	// Zarf's own record of the image: its OCI layout's index.json.
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(pkg.Dir, "images", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("Zarf's images/index.json: %s (%v)", b, err)
	}
	zarfDigest := index.Manifests[0].Digest
	if zarfDigest != img.Digest.String() {
		t.Errorf("Zarf carries %s, the registry has %s", zarfDigest, img.Digest)
	}
	for name, cfg := range map[string]*artifact.Config{"converted": converted.Config, "imported": imported.Config} {
		c := cfg.Components[0]
		if len(c.Images) != 1 || c.Images[0].Digest.String() != zarfDigest || c.Images[0].Ref != imageRef {
			t.Errorf("%s: images %+v, want %s@%s", name, c.Images, imageRef, zarfDigest)
		}
		if len(c.Charts) != 1 || c.Charts[0].ReleaseName != "web" || c.Charts[0].Namespace != "shop" {
			t.Errorf("%s: charts %+v", name, c.Charts)
		}
		if len(c.Manifests) != 1 || len(c.Files) != 1 || c.Files[0].Target != "/etc/app.conf" {
			t.Errorf("%s: manifests %+v files %+v", name, c.Manifests, c.Files)
		}
		if len(c.Repositories) != 1 || c.Repositories[0].Commit != commit {
			t.Errorf("%s: repositories %+v, want commit %s", name, c.Repositories, commit)
		}
	}
	// The manifests Zarf carries are the source's bytes (ferry's bundles
	// differ only by the "# Source: path" line naming where each came
	// from); the file is the same content.
	zarfManifest, err := os.ReadFile(filepath.Join(pkg.Dir, "components", "web", "manifests", "worker-0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if srcManifest, _ := os.ReadFile(filepath.Join(src, "manifests", "deploy.yaml")); string(zarfManifest) != string(srcManifest) {
		t.Errorf("Zarf's manifest differs from its source:\n%s", zarfManifest)
	}
	if cf, imf := converted.Config.Components[0].Files[0], imported.Config.Components[0].Files[0]; cf.Digest != imf.Digest || imf.Mode != 0o600 {
		t.Errorf("files differ: converted %+v, imported %+v (want Zarf's mode 0600)", cf, imf)
	}
	// Zarf's SBOM of the image (Syft JSON) is carried as a referrer of the
	// manifest it describes, byte for byte; its HTML viewers are a gap.
	zarfDoc, err := os.ReadFile(filepath.Join(pkg.Dir, zarf.SBOMDir, strings.NewReplacer("/", "_", ":", "_").Replace(imageRef)+".json"))
	if err != nil {
		t.Fatalf("Zarf's SBOM of %s: %v", imageRef, err)
	}
	if s := imported.Config.Components[0].Images[0].SBOMs; len(ires.SBOMs) != 1 || len(s) != 1 || s[0].ArtifactType != artifact.ArtifactTypeSyft || s[0].Subject.String() != zarfDigest {
		t.Errorf("Zarf's SBOMs: import found %+v, ferry.json records %+v", ires.SBOMs, s)
	}
	r, err := artifact.Open(ctx, imported.Path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := artifact.ReadSBOMs(ctx, r, "", imageRef, "")
	if err != nil || len(docs) != 1 || !bytes.Equal(docs[0].Data, zarfDoc) {
		t.Errorf("ReadSBOMs: %v (%d documents), want Zarf's %d bytes", err, len(docs), len(zarfDoc))
	}
	var viewerGap bool
	for _, g := range ires.Gaps {
		viewerGap = viewerGap || strings.Contains(g.What, "HTML SBOM viewers")
	}
	if !viewerGap {
		t.Errorf("Zarf's SBOM viewers not reported: %v", ires.Gaps)
	}
	t.Logf("Zarf image %s (its SBOM %d bytes); converted root %s, imported root %s; %d and %d gaps", zarfDigest, len(zarfDoc), converted.Root.Digest, imported.Root.Digest, len(res.Gaps), len(ires.Gaps))
}

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
