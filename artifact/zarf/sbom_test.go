package zarf_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// sbomDef is the zarf.yaml of a built package with two images, as zarf
// package create writes it (the checksum filled in by sbomPackage).
const sbomDef = `kind: ZarfPackageConfig
metadata:
  name: sboms
  version: 1.0.0
  architecture: amd64
  aggregateChecksum: %s
build:
  architecture: amd64
  version: v0.60.0
components:
  - name: app
    required: true
    images:
      - example.com/shop/app:1.0
      - example.com/shop/db:2.0
`

// syftDoc is a Syft JSON document, as Zarf writes one per image.
const syftDoc = `{"artifacts":[{"id":"a1","name":"libferry1","version":"1.0"}],"artifactRelationships":[],"source":{"type":"image","metadata":{"userInput":"example.com/shop/app:1.0"}},"distro":{},"descriptor":{"name":"zarf","version":"v0.60.0"},"schema":{"version":"16.0.34","url":"https://raw.githubusercontent.com/anchore/syft/main/schema/json/schema-16.0.34.json"}}`

// sbomPackage writes a built Zarf package whose OCI layout holds the two
// images of sbomDef (tagged by their full references, as Zarf's ref.name)
// and whose sboms.tar holds sboms; compressed with zstd unless plain. It
// returns the package's path and the images' manifests by reference.
func sbomPackage(t *testing.T, dir string, sboms map[string][]byte, plain bool) (string, map[string]ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	layout := filepath.Join(t.TempDir(), "images")
	store, err := oci.New(layout)
	if err != nil {
		t.Fatal(err)
	}
	imgs := map[string]ocispec.Descriptor{}
	for _, ref := range []string{"example.com/shop/app:1.0", "example.com/shop/db:2.0"} {
		m, err := fixture.PushImage(ctx, store, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.FileLayer(ref, []byte(ref), 0o644)})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Tag(ctx, m, ref); err != nil {
			t.Fatal(err)
		}
		imgs[ref] = m
	}
	files := map[string][]byte{"sboms.tar": tarOf(t, sboms, nil)}
	err = filepath.WalkDir(layout, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(layout, p)
		files["images/"+filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for n, b := range files {
		lines = append(lines, fmt.Sprintf("%x %s", sha256.Sum256(b), n))
	}
	sort.Strings(lines)
	sums := []byte(strings.Join(lines, "\n") + "\n")
	files["checksums.txt"] = sums
	files["zarf.yaml"] = []byte(fmt.Sprintf(sbomDef, fmt.Sprintf("%x", sha256.Sum256(sums))))
	data := tarOf(t, files, nil)
	p := filepath.Join(dir, "zarf-package-sboms-amd64-1.0.0.tar")
	if !plain {
		var zbuf bytes.Buffer
		zw, _ := zstd.NewWriter(&zbuf)
		zw.Write(data)
		zw.Close()
		data, p = zbuf.Bytes(), p+".zst"
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, imgs
}

// spdxGen is ferry's own generator standing in for Syft: a fixed SPDX
// document, naming the image.
type spdxGen struct{}

func (spdxGen) GenerateSBOM(_ context.Context, _ content.Fetcher, req build.SBOMRequest) ([]byte, error) {
	return []byte(`{"spdxVersion":"SPDX-2.3","name":"` + req.Ref + `"}`), nil
}

// importSBOMs extracts and imports archive and creates its ferry package
// with gen (zarf.SBOMs serving the import's documents, over next).
func importSBOMs(t *testing.T, archive string, next build.SBOMGenerator) (*zarf.Result, *build.CreateResult, error) {
	t.Helper()
	dir := t.TempDir()
	pkg, err := zarf.Extract(archive, filepath.Join(dir, "x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := zarf.Import(pkg)
	if err != nil {
		return nil, nil, err
	}
	defFile := filepath.Join(pkg.Dir, definition.FileName)
	if err := os.WriteFile(defFile, res.Definition, 0o600); err != nil {
		t.Fatal(err)
	}
	def, err := definition.Load(defFile)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Definition)
	}
	created, err := build.Create(context.Background(), def, build.CreateOptions{
		Output: filepath.Join(dir, "p.tar.zst"), SBOM: zarf.SBOMs{Images: res.SBOMs, Next: next},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, created, nil
}

// TestImportSBOMs: the Syft document Zarf made of an image (sboms.tar,
// named after its reference) is kept as a referrer of the manifest it
// describes: listed in ferry.json and the package root with artifactType
// application/vnd.syft+json, and ReadSBOMs returns the same bytes. An
// image Zarf has no document of gets none, or ferry's own with a Next
// generator (import --sbom), which never replaces Zarf's. The HTML
// viewers and the SBOM of a component's files are reported as gaps.
func TestImportSBOMs(t *testing.T) {
	ctx := context.Background()
	archive, imgs := sbomPackage(t, t.TempDir(), map[string][]byte{
		"example.com_shop_app_1.0.json":             []byte(syftDoc),
		"sbom-viewer-example.com_shop_app_1.0.html": []byte("<html></html>"),
		"compare.html":                        []byte("<html></html>"),
		"zarf-component-app.json":             []byte(syftDoc),
		"sbom-viewer-zarf-component-app.html": []byte("<html></html>"),
	}, false)
	for _, tc := range []struct {
		name string
		next build.SBOMGenerator
	}{{"zarf only", nil}, {"with --sbom", spdxGen{}}} {
		t.Run(tc.name, func(t *testing.T) {
			res, created, err := importSBOMs(t, archive, tc.next)
			if err != nil {
				t.Fatal(err)
			}
			app := imgs["example.com/shop/app:1.0"]
			if len(res.SBOMs) != 1 || res.SBOMs[0].Ref != "example.com/shop/app:1.0" || res.SBOMs[0].Manifest != app.Digest {
				t.Fatalf("import found %+v, want the app's document of %s", res.SBOMs, app.Digest)
			}
			var gaps []string
			for _, g := range res.Gaps {
				gaps = append(gaps, g.String())
			}
			joined := strings.Join(gaps, "\n")
			for _, want := range []string{
				"/sboms.tar: Zarf's HTML SBOM viewers (compare.html and 2 more) — not carried",
				"/sboms.tar: zarf-component-app.json: the SBOM Zarf made of component app's files and data injections — not carried",
			} {
				if !strings.Contains(joined, want) {
					t.Errorf("gaps lack %q:\n%s", want, joined)
				}
			}
			imgRecs := created.Config.Components[0].Images
			appSBOMs, dbSBOMs := imgRecs[0].SBOMs, imgRecs[1].SBOMs
			if len(appSBOMs) != 1 || appSBOMs[0].ArtifactType != definition.ArtifactTypeSyft || appSBOMs[0].Subject != app.Digest || appSBOMs[0].Platform != "linux/amd64" {
				t.Errorf("ferry.json: the app's SBOMs %+v", appSBOMs)
			}
			wantDB := 0
			if tc.next != nil {
				wantDB = 1
			}
			if len(dbSBOMs) != wantDB || wantDB == 1 && (dbSBOMs[0].ArtifactType != definition.ArtifactTypeSPDX || dbSBOMs[0].Subject != imgs["example.com/shop/db:2.0"].Digest) {
				t.Errorf("ferry.json: the db's SBOMs %+v, want %d SPDX", dbSBOMs, wantDB)
			}
			r, err := artifact.Open(ctx, created.Path)
			if err != nil {
				t.Fatal(err)
			}
			root, err := content.FetchAll(ctx, r, created.Root)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(root, []byte(appSBOMs[0].Digest.String())) || !bytes.Contains(root, []byte(`"artifactType":"application/vnd.syft+json"`)) {
				t.Errorf("the root does not list the app's SBOM %s:\n%s", appSBOMs[0].Digest, root)
			}
			docs, err := artifact.ReadSBOMs(ctx, r, "", "example.com/shop/app:1.0", "")
			if err != nil || len(docs) != 1 || string(docs[0].Data) != syftDoc {
				t.Fatalf("ReadSBOMs: %v %+v", err, docs)
			}
		})
	}
}

// TestImportSBOMRefused: a document over artifact.MaxSBOMSize is refused
// in one line, before anything is created; one that is not Syft's JSON is
// refused at create.
func TestImportSBOMRefused(t *testing.T) {
	big := bytes.Repeat([]byte(" "), artifact.MaxSBOMSize+1)
	archive, _ := sbomPackage(t, t.TempDir(), map[string][]byte{"example.com_shop_app_1.0.json": big}, true)
	pkg, err := zarf.Extract(archive, filepath.Join(t.TempDir(), "x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = zarf.Import(pkg)
	want := "package is corrupt: sboms.tar:example.com_shop_app_1.0.json: the SBOM of example.com/shop/app:1.0 is 67108865 bytes, more than 67108864"
	if err == nil || !errors.Is(err, artifact.ErrCorrupt) || err.Error() != want {
		t.Errorf("an oversized SBOM: %v\nwant %s", err, want)
	}

	archive, _ = sbomPackage(t, t.TempDir(), map[string][]byte{"example.com_shop_app_1.0.json": []byte(`{"spdxVersion":"SPDX-2.3"}`)}, false)
	pkg, err = zarf.Extract(archive, filepath.Join(t.TempDir(), "y"), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := zarf.Import(pkg)
	if err != nil {
		t.Fatal(err)
	}
	defFile := filepath.Join(pkg.Dir, definition.FileName)
	os.WriteFile(defFile, res.Definition, 0o600)
	def, err := definition.Load(defFile)
	if err != nil {
		t.Fatal(err)
	}
	_, err = build.Create(context.Background(), def, build.CreateOptions{Output: filepath.Join(t.TempDir(), "p.tar"), SBOM: zarf.SBOMs{Images: res.SBOMs}})
	if err == nil || !strings.Contains(err.Error(), "is not a Syft JSON document") {
		t.Errorf("an SPDX document as Zarf's: %v", err)
	}
}
