package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestMain removes the ferry-sbom helper the SBOM tests build.
func TestMain(m *testing.M) {
	code := m.Run()
	sbomexectest.Cleanup()
	os.Exit(code)
}

var goBinary struct {
	once sync.Once
	data []byte
	err  error
}

// sbomWorld writes a definition folder whose OCI layout holds the SBOM
// fixture image twice: "app" for linux/amd64 and linux/arm64 (an index),
// "one" for linux/amd64 only. extra is appended to the definition.
func sbomWorld(t testing.TB, extra string) string {
	t.Helper()
	ctx := context.Background()
	goBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-gobin-")
		if err != nil {
			goBinary.err = err
			return
		}
		defer os.RemoveAll(dir)
		goBinary.data, goBinary.err = fixture.GoBinary(ctx, dir, "amd64")
	})
	if goBinary.err != nil {
		t.Fatal(goBinary.err)
	}
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []ocispec.Descriptor
	for _, arch := range []string{"amd64", "arm64"} {
		p := fixture.Platform("linux", arch, "")
		m, err := fixture.SBOMImage(ctx, store, p, goBinary.data)
		if err != nil {
			t.Fatal(err)
		}
		m.Platform = &p
		ms = append(ms, m)
		if arch == "amd64" {
			if err := store.Tag(ctx, m, "one"); err != nil {
				t.Fatal(err)
			}
		}
	}
	idx, err := fixture.PushIndex(ctx, store, ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, idx, "app"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, definition.FileName), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: sboms, version: 1.0.0}
platforms: [linux/amd64, linux/arm64]
components:
  - name: base
    images:
      - {ref: example.com/org/app:1.0, layout: images, tag: app}
      - {ref: example.com/org/one:1.0, layout: images, tag: one}
`+extra)
	return dir
}

// syft returns a generator running the real ferry-sbom helper (Syft),
// built once per test binary.
func syft(t testing.TB) build.SBOMGenerator {
	t.Helper()
	gen, err := sbomexectest.Generator()
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// createSBOMs creates the package of dir.
func createSBOMs(t testing.TB, dir, out string, opts build.CreateOptions) *build.CreateResult {
	t.Helper()
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts.Output = out
	res, err := build.Create(context.Background(), def, opts)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res
}

// TestCreateSBOMs: one SBOM per kept platform manifest, a referrer of it
// listed in the root (kind sbom, no platform field), recorded in ferry.json
// and counted in the sizes; the same inputs give the same root; the
// package reads and inspects clean; without a generator, or with
// `sbom: {enabled: false}`, there are none.
func TestCreateSBOMs(t *testing.T) {
	ctx := context.Background()
	dir := sbomWorld(t, "")
	out := filepath.Join(t.TempDir(), "p.tar")
	res := createSBOMs(t, dir, out, build.CreateOptions{SBOM: syft(t)})
	a := loadArchive(t, out)
	entries := map[digest.Digest]ocispec.Descriptor{}
	for _, m := range a.index0(t, a.root).Manifests {
		if m.Annotations[artifact.AnnotationKind] == artifact.KindSBOM {
			entries[m.Digest] = m
		}
	}
	imgs := res.Config.Components[0].Images
	if len(entries) != 3 || len(imgs[0].SBOMs) != 2 || len(imgs[1].SBOMs) != 1 {
		t.Fatalf("%d SBOM entries in the root; ferry.json records %d and %d", len(entries), len(imgs[0].SBOMs), len(imgs[1].SBOMs))
	}
	var sbomSize int64
	for _, img := range imgs {
		subjects := map[digest.Digest]string{}
		if img.MediaType == ocispec.MediaTypeImageIndex {
			for _, m := range a.index0(t, img.Digest).Manifests {
				subjects[m.Digest] = m.Platform.OS + "/" + m.Platform.Architecture
			}
		} else {
			subjects[img.Digest] = img.Platforms[0]
		}
		for _, s := range img.SBOMs {
			sbomSize += s.Size
			e, ok := entries[s.Digest]
			if !ok {
				t.Fatalf("%s: SBOM %s is not in the root", img.Ref, s.Digest)
			}
			if e.Platform != nil || e.ArtifactType != definition.ArtifactTypeSPDX || e.Annotations[artifact.AnnotationImageRef] != img.Ref ||
				e.Annotations[artifact.AnnotationPlatform] != s.Platform || e.Annotations[artifact.AnnotationComponent] != "base" {
				t.Errorf("root entry %+v", e)
			}
			m := a.manifest(t, s.Digest)
			if m.ArtifactType != definition.ArtifactTypeSPDX || m.Config.Digest != ocispec.DescriptorEmptyJSON.Digest || len(m.Layers) != 1 ||
				m.Layers[0].MediaType != definition.ArtifactTypeSPDX || m.Layers[0].Annotations[ocispec.AnnotationTitle] != "sbom.spdx.json" {
				t.Errorf("SBOM manifest %+v", m)
			}
			if m.Subject == nil || m.Subject.Digest != s.Subject || subjects[s.Subject] != s.Platform {
				t.Errorf("%s: SBOM subject %v, want the %s manifest (%v)", img.Ref, m.Subject, s.Platform, subjects)
			}
			if doc := a.blob(t, m.Layers[0].Digest); !bytes.Contains(doc, []byte(`"libferry1"`)) {
				t.Errorf("the SBOM of %s %s does not list libferry1", img.Ref, s.Platform)
			}
		}
	}
	rep, err := artifact.Inspect(ctx, openPkg(t, out), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var imgSize int64
	for _, img := range imgs {
		imgSize += img.Size
	}
	if rep.TotalSize != imgSize+sbomSize {
		t.Errorf("total size %d, want images %d + SBOMs %d", rep.TotalSize, imgSize, sbomSize)
	}

	again := createSBOMs(t, dir, filepath.Join(t.TempDir(), "p.tar"), build.CreateOptions{SBOM: syft(t)})
	if again.Root.Digest != res.Root.Digest {
		t.Errorf("the same inputs gave another root: %s, then %s", res.Root.Digest, again.Root.Digest)
	}

	for name, c := range map[string]struct {
		extra string
		gen   build.SBOMGenerator
	}{
		"no generator": {"", nil},
		"disabled":     {"sbom: {enabled: false}\n", syft(t)},
	} {
		res := createSBOMs(t, sbomWorld(t, c.extra), filepath.Join(t.TempDir(), "p.tar"), build.CreateOptions{SBOM: c.gen})
		for _, img := range res.Config.Components[0].Images {
			if len(img.SBOMs) != 0 {
				t.Errorf("%s: %s has SBOMs", name, img.Ref)
			}
		}
	}
	cdx := createSBOMs(t, sbomWorld(t, "sbom: {format: cyclonedx-json}\n"), filepath.Join(t.TempDir(), "p.tar"), build.CreateOptions{SBOM: syft(t)})
	if s := cdx.Config.Components[0].Images[1].SBOMs; len(s) != 1 || s[0].ArtifactType != definition.ArtifactTypeCycloneDX {
		t.Errorf("format: cyclonedx-json gave %+v", s)
	}
}

// TestSBOMDefinitionErrors: bad `sbom:` values are refused with their line.
func TestSBOMDefinitionErrors(t *testing.T) {
	head := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: p, version: '1'}\n"
	for _, c := range []struct{ body, want string }{
		{"sbom:\n  format: xml\n", "ferry.yaml:5: sbom.format: must be spdx-json or cyclonedx-json, not \"xml\""},
		{"sbom:\n  enabled: maybe\n", "ferry.yaml:5: sbom.enabled: must be true or false"},
		{"sbom:\n  formats: spdx-json\n", "ferry.yaml:5: sbom.formats: unknown field"},
		{"sbom: yes\n", "ferry.yaml:4: sbom: must be a mapping"},
	} {
		_, err := definition.Parse("ferry.yaml", []byte(head+c.body))
		var de *definition.Error
		if !errors.As(err, &de) || err.Error() != c.want {
			t.Errorf("%q: %v, want %s", c.body, err, c.want)
		}
	}
}

// rewriteSBOM re-makes the package at a with the SBOM manifest at
// ferry.json's image i, SBOM k, edited, and everything above it (ferry.json,
// the package manifest, the root, index.json, the signature's tag) made
// consistent: only the signature, or the graph checks, can object.
func rewriteSBOM(t testing.TB, a *pkgArchive, i, k int, edit func(m *ocispec.Manifest, doc []byte) []byte) string {
	t.Helper()
	var cfg artifact.Config
	if err := json.Unmarshal(a.file(t, artifact.ConfigFileName), &cfg); err != nil {
		t.Fatal(err)
	}
	rec := &cfg.Components[0].Images[i].SBOMs[k]
	m := a.manifest(t, rec.Digest)
	doc := edit(&m, a.blob(t, m.Layers[0].Digest))
	replaced := map[digest.Digest][]byte{} // old digest → new bytes
	replaced[m.Layers[0].Digest] = doc
	m.Layers[0].Digest, m.Layers[0].Size = digest.FromBytes(doc), int64(len(doc))
	mdata, _ := json.Marshal(m)
	replaced[rec.Digest] = mdata
	oldSBOM := rec.Digest
	rec.Digest = digest.FromBytes(mdata)
	cdata, _ := json.Marshal(cfg)
	pkg := a.kind(t, artifact.KindPackage)
	pm := a.manifest(t, pkg.Digest)
	replaced[pm.Config.Digest] = cdata
	pm.Config.Digest, pm.Config.Size = digest.FromBytes(cdata), int64(len(cdata))
	pdata, _ := json.Marshal(pm)
	replaced[pkg.Digest] = pdata
	root := a.index0(t, a.root)
	for j, e := range root.Manifests {
		switch e.Digest {
		case pkg.Digest:
			root.Manifests[j].Digest, root.Manifests[j].Size = digest.FromBytes(pdata), int64(len(pdata))
		case oldSBOM:
			root.Manifests[j].Digest, root.Manifests[j].Size = rec.Digest, int64(len(mdata))
		}
	}
	rdata, _ := json.Marshal(root)
	replaced[a.root] = rdata
	newRoot := digest.FromBytes(rdata)
	return a.write(t, func(es []tarEntry) []tarEntry {
		for j, e := range es {
			for old, data := range replaced {
				if e.Header.Name == "blobs/sha256/"+old.Encoded() {
					h := *e.Header
					h.Name, h.Size = "blobs/sha256/"+digest.FromBytes(data).Encoded(), int64(len(data))
					es[j] = tarEntry{&h, data}
				}
			}
			if e.Header.Name == artifact.ConfigFileName {
				h := *e.Header
				h.Size = int64(len(cdata))
				es[j] = tarEntry{&h, cdata}
			}
		}
		idx := a.index
		idx.Manifests = append([]ocispec.Descriptor(nil), a.index.Manifests...)
		idx.Manifests[0].Digest, idx.Manifests[0].Size = newRoot, int64(len(rdata))
		for j := 1; j < len(idx.Manifests); j++ {
			idx.Manifests[j].Annotations = map[string]string{ocispec.AnnotationRefName: artifact.SignatureTag(newRoot)}
		}
		setFile(t, es, "index.json", idx)
		return es
	})
}

// TestVerifySBOMTamper: a flipped byte in an SBOM document fails Verify
// naming the blob; an SBOM swapped for another (a new root) fails the
// signature; an SBOM whose subject is another image's manifest is refused.
func TestVerifySBOMTamper(t *testing.T) {
	ctx := context.Background()
	keys := t.TempDir()
	alice, alicePub := keyPair(t, keys, "alice")
	dir := sbomWorld(t, "")
	out := filepath.Join(t.TempDir(), "p.tar")
	res := createSBOMs(t, dir, out, build.CreateOptions{SBOM: syft(t), SignKey: alice})
	if _, err := verifyFile(out, alicePub); err != nil {
		t.Fatalf("the untampered package: %v", err)
	}
	a := loadArchive(t, out)
	rec := res.Config.Components[0].Images[1].SBOMs[0]
	doc := a.manifest(t, rec.Digest).Layers[0].Digest

	_, err := verifyFile(a.write(t, flip(doc)), alicePub)
	if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "blob "+doc.String()+" does not match its digest") {
		t.Errorf("a flipped byte in an SBOM: %v", err)
	}

	swapped := rewriteSBOM(t, a, 1, 0, func(_ *ocispec.Manifest, doc []byte) []byte {
		return bytes.ReplaceAll(doc, []byte("1.2.3-1"), []byte("1.2.3-9"))
	})
	if _, err := verifyFile(swapped, alicePub); !errors.Is(err, artifact.ErrSignature) || !strings.Contains(err.Error(), "not the package root") {
		t.Errorf("a swapped SBOM: %v, want %v", err, artifact.ErrSignature)
	}

	// Unsigned (nothing else objects first), the subject made the "app"
	// image's arm64 manifest, not "one"'s.
	unsigned := filepath.Join(t.TempDir(), "p.tar")
	createSBOMs(t, dir, unsigned, build.CreateOptions{SBOM: syft(t)})
	other := res.Config.Components[0].Images[0].SBOMs[1].Subject
	moved := rewriteSBOM(t, loadArchive(t, unsigned), 1, 0, func(m *ocispec.Manifest, doc []byte) []byte {
		m.Subject.Digest = other
		return doc
	})
	_, err = artifact.Inspect(ctx, openPkg(t, moved), "", nil)
	if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "its subject is not a manifest of image example.com/org/one:1.0") {
		t.Errorf("an SBOM of another image's manifest: %v", err)
	}
}

// TestSBOMOrasInterop: pushed to a registry, the SBOMs are referrers of
// the platform manifests: after `oras copy -r` of an image to another
// repository, and after Mirror under the image's path, `oras discover`
// lists each with ferry.json's digest; the registry path (Inspect of a
// reference) checks them too.
func TestSBOMOrasInterop(t *testing.T) {
	orasBin := peertool.Require(t, "oras")
	ctx := context.Background()
	host := registrytest.New(t)
	out := filepath.Join(t.TempDir(), "p.tar")
	res := createSBOMs(t, sbomWorld(t, ""), out, build.CreateOptions{SBOM: syft(t)})
	if _, err := pushFile(t, out, host+"/pkgs/sboms:1.0.0", artifact.PushOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := inspectRemote(ctx, host+"/pkgs/sboms:1.0.0"); err != nil {
		t.Fatalf("inspect the pushed package: %v", err)
	}
	discover := func(ref string) map[digest.Digest]string {
		t.Helper()
		cmd := exec.Command(orasBin, "discover", "--plain-http", "--format", "json", ref)
		data, err := cmd.Output()
		if err != nil {
			t.Fatalf("oras discover %s: %v", ref, err)
		}
		var got struct {
			Referrers []struct {
				Digest       digest.Digest `json:"digest"`
				ArtifactType string        `json:"artifactType"`
			} `json:"referrers"`
			Manifests []struct {
				Digest       digest.Digest `json:"digest"`
				ArtifactType string        `json:"artifactType"`
			} `json:"manifests"`
		}
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("oras discover %s: %v\n%s", ref, err, data)
		}
		m := map[digest.Digest]string{}
		for _, r := range got.Referrers {
			m[r.Digest] = r.ArtifactType
		}
		for _, r := range got.Manifests {
			m[r.Digest] = r.ArtifactType
		}
		return m
	}
	img := res.Config.Components[0].Images[0]
	if out, err := exec.Command(orasBin, "copy", "-r", "--from-plain-http", "--to-plain-http", host+"/pkgs/sboms@"+img.Digest.String(), host+"/copied/app:1.0").CombinedOutput(); err != nil {
		t.Fatalf("oras copy -r: %v\n%s", err, out)
	}
	for _, s := range img.SBOMs {
		if got := discover(host + "/copied/app@" + s.Subject.String()); got[s.Digest] != definition.ArtifactTypeSPDX {
			t.Errorf("oras discover on the copy's %s manifest: %v, want %s", s.Platform, got, s.Digest)
		}
	}

	mirror := registrytest.New(t)
	if _, err := artifact.Mirror(ctx, openPkg(t, out), mirror, artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}}); err != nil {
		t.Fatal(err)
	}
	for _, img := range res.Config.Components[0].Images {
		path, _, _ := artifact.ImagePath(img.Ref)
		for _, s := range img.SBOMs {
			if got := discover(mirror + "/" + path + "@" + s.Subject.String()); got[s.Digest] != definition.ArtifactTypeSPDX {
				t.Errorf("oras discover on the mirrored %s %s: %v, want %s", img.Ref, s.Platform, got, s.Digest)
			}
		}
	}
}

// servedSBOMs is an SBOMFormatGenerator serving Syft documents already
// made, by image reference; ErrNoSBOM for any other image.
type servedSBOMs map[string][]byte

func (s servedSBOMs) GenerateSBOM(ctx context.Context, src content.Fetcher, req build.SBOMRequest) ([]byte, error) {
	doc, _, err := s.GenerateSBOMFormat(ctx, src, req)
	return doc, err
}

func (s servedSBOMs) GenerateSBOMFormat(_ context.Context, _ content.Fetcher, req build.SBOMRequest) ([]byte, definition.SBOMFormat, error) {
	if doc, ok := s[req.Ref]; ok {
		return doc, definition.SBOMFormatSyft, nil
	}
	return nil, "", build.ErrNoSBOM
}

var _ build.SBOMFormatGenerator = servedSBOMs{}

// TestCreateServedSBOMs: an SBOMFormatGenerator's documents are stored in
// the format it names (Syft JSON: artifactType application/vnd.syft+json,
// title sbom.syft.json), the package reads and inspects clean and
// ReadSBOMs returns the same bytes; ErrNoSBOM leaves an image without
// one; a document over MaxSBOMSize is refused.
func TestCreateServedSBOMs(t *testing.T) {
	ctx := context.Background()
	doc := []byte(`{"artifacts":[{"name":"libferry1"}],"schema":{"version":"16.0.34"}}`)
	out := filepath.Join(t.TempDir(), "p.tar")
	res := createSBOMs(t, sbomWorld(t, ""), out, build.CreateOptions{SBOM: servedSBOMs{"example.com/org/one:1.0": doc}})
	imgs := res.Config.Components[0].Images
	if len(imgs[0].SBOMs) != 0 || len(imgs[1].SBOMs) != 1 || imgs[1].SBOMs[0].ArtifactType != definition.ArtifactTypeSyft || imgs[1].SBOMs[0].Subject != imgs[1].Digest {
		t.Fatalf("SBOMs %+v and %+v", imgs[0].SBOMs, imgs[1].SBOMs)
	}
	a := loadArchive(t, out)
	m := a.manifest(t, imgs[1].SBOMs[0].Digest)
	if m.ArtifactType != definition.ArtifactTypeSyft || m.Layers[0].MediaType != definition.ArtifactTypeSyft || m.Layers[0].Annotations[ocispec.AnnotationTitle] != "sbom.syft.json" {
		t.Errorf("SBOM manifest %+v", m)
	}
	if _, err := artifact.Inspect(ctx, openPkg(t, out), "", nil); err != nil {
		t.Fatal(err)
	}
	docs, err := artifact.ReadSBOMs(ctx, openPkg(t, out), "", "example.com/org/one:1.0", "")
	if err != nil || len(docs) != 1 || !bytes.Equal(docs[0].Data, doc) || docs[0].Platform != "linux/amd64" {
		t.Fatalf("ReadSBOMs: %v, %+v", err, docs)
	}

	def, err := definition.Load(sbomWorld(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, artifact.MaxSBOMSize+1)
	_, err = build.Create(ctx, def, build.CreateOptions{SBOM: servedSBOMs{"example.com/org/one:1.0": big}, Output: filepath.Join(t.TempDir(), "p.tar")})
	if err == nil || !strings.Contains(err.Error(), "is more than 67108864") || strings.Contains(err.Error(), "\n") {
		t.Errorf("an oversized document: %v", err)
	}
}
