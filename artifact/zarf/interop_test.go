package zarf_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/artifact/zarf/zarftest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// A real Zarf v0.60.0 package, made here from a zarf.yaml with an image of
// a local registry, a chart, manifests, a file and a git repository:
// converting its zarf.yaml and creating, and importing the built package,
// both give ferry packages that carry the image by the digest Zarf carries
// (the one `zarf package deploy` pushes and names), the same manifests,
// file and commit.
func TestZarfInterop(t *testing.T) {
	zarfPath := zarftest.Bin(t)
	ctx := context.Background()

	host := registrytest.New(t)
	repo, err := remote.NewRepository(host + "/shop/app")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	img, err := fixture.PushImage(ctx, repo, fixture.Platform("linux", runtime.GOARCH, ""), []fixture.Layer{fixture.FileLayer("app", []byte("app\n"), 0o755)})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, img, "1.0"); err != nil {
		t.Fatal(err)
	}
	imageRef := host + "/shop/app:1.0"
	zp := zarftest.Make(t, zarfPath, zarftest.Source{Image: imageRef})
	src, commit := zp.Src, zp.Commit
	dir := t.TempDir()

	// Convert + create.
	res, converted := zp.Convert(ctx, t, build.CreateOptions{Output: filepath.Join(dir, "converted.tar.zst")})

	// Import.
	im := zp.Import(ctx, t, build.CreateOptions{Output: filepath.Join(dir, "imported.tar.zst")})
	pkg, ires, imported := im.Zarf, im.Result, im.Created
	if !pkg.Verified {
		t.Error("Zarf's signature not verified")
	}

	// Zarf's own record of the image: its OCI layout's index.json.
	zarfDigest := zarftest.ImageDigest(t, pkg)
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
	if s := imported.Config.Components[0].Images[0].SBOMs; len(ires.SBOMs) != 1 || len(s) != 1 || s[0].ArtifactType != definition.ArtifactTypeSyft || s[0].Subject.String() != zarfDigest {
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
