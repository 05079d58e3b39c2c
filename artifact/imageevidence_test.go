package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// evidenceWorld is a registry holding images signed by the real cosign
// CLI, and a definition packaging them for linux/amd64.
type evidenceWorld struct {
	dir, host, keys string
	cosign          *cosignCLI
	// signed (cosign sign + attest, tag scheme), referred (cosign sign
	// --registry-referrers-mode=oci-1-1), bundled (cosign attest
	// --new-bundle-format), plain (no evidence), multi (an
	// amd64+arm64 index signed at the index digest): their digests.
	signed, referred, bundled, plain, multi, multiAMD64 digest.Digest
}

func newEvidenceWorld(t *testing.T) *evidenceWorld {
	t.Helper()
	ctx := context.Background()
	w := &evidenceWorld{dir: t.TempDir(), host: registrytest.New(t), keys: t.TempDir(), cosign: newCosign(t)}
	rng := fixture.Rand(34)
	amd, arm := fixture.Platform("linux", "amd64", ""), fixture.Platform("linux", "arm64", "")
	mem := memory.New()
	push := func(repo string, desc ocispec.Descriptor) digest.Digest {
		if err := mem.Tag(ctx, desc, repo); err != nil {
			t.Fatal(err)
		}
		if _, err := oras.Copy(ctx, mem, repo, remoteRepo(t, w.host+"/"+repo+":1.0"), "1.0", oras.DefaultCopyOptions); err != nil {
			t.Fatal(err)
		}
		return desc.Digest
	}
	for _, name := range []string{"signed", "referred", "bundled", "plain"} {
		img, err := fixture.PushImage(ctx, mem, amd, []fixture.Layer{fixture.NewLayer(rng, 8<<10)})
		if err != nil {
			t.Fatal(err)
		}
		d := push("sig/"+name, img)
		switch name {
		case "signed":
			w.signed = d
		case "referred":
			w.referred = d
		case "bundled":
			w.bundled = d
		case "plain":
			w.plain = d
		}
	}
	multi, err := fixture.MultiPlatformImage(ctx, mem, rng, []ocispec.Platform{amd, arm}, nil, 1, 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	w.multi = push("sig/multi", multi)
	w.multiAMD64 = platformChild(t, ctx, mem, multi, "amd64")

	c := w.cosign
	c.must("pw", "generate-key-pair", "--output-key-prefix", filepath.Join(w.keys, "pub"))
	writeFile(t, filepath.Join(w.keys, "p.json"), `{"buildType":"https://example.com/build/v1","builder":{"id":"https://example.com/builder"}}`)
	sign := []string{"sign", "--key", filepath.Join(w.keys, "pub.key"), "--tlog-upload=false", "--allow-http-registry", "-y"}
	c.must("pw", append(sign, w.ref("signed", w.signed))...)
	c.must("pw", "attest", "--key", filepath.Join(w.keys, "pub.key"), "--predicate", filepath.Join(w.keys, "p.json"),
		"--type", "slsaprovenance", "--tlog-upload=false", "--allow-http-registry", "-y", w.ref("signed", w.signed))
	c.must("pw", append(sign, w.ref("multi", w.multi))...)
	c.env = []string{"COSIGN_EXPERIMENTAL=1"}
	c.must("pw", append(sign, "--registry-referrers-mode=oci-1-1", w.ref("referred", w.referred))...)
	c.env = nil
	c.must("pw", "attest", "--key", filepath.Join(w.keys, "pub.key"), "--predicate", filepath.Join(w.keys, "p.json"),
		"--type", "slsaprovenance", "--new-bundle-format", "--tlog-upload=false", "--allow-http-registry", "-y", w.ref("bundled", w.bundled))

	writeFile(t, filepath.Join(w.dir, definition.FileName), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: signed, version: 1.0.0}
platforms: [linux/amd64]
components:
  - name: app
    images:
      - %[1]s/sig/signed:1.0
      - %[1]s/sig/referred:1.0
      - %[1]s/sig/bundled:1.0
      - %[1]s/sig/plain:1.0
      - %[1]s/sig/multi:1.0
`, w.host))
	return w
}

func (w *evidenceWorld) ref(name string, d digest.Digest) string {
	return w.host + "/sig/" + name + "@" + d.String()
}

func (w *evidenceWorld) create(t *testing.T, out string) *build.CreateResult {
	t.Helper()
	def, err := definition.Load(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build.Create(context.Background(), def, build.CreateOptions{Output: out})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res
}

// TestImageSignaturesCarried: create carries what cosign made — the .sig
// and .att tags of "signed", the OCI 1.1 referrer of "referred", the .sig
// of "multi"'s index (with the index, as only amd64 is kept) — recorded in
// ferry.json and listed in the root; "plain" has none; the package reads
// back clean; mirrored to another registry, the real `cosign verify` and
// `cosign verify-attestation` pass there.
func TestImageSignaturesCarried(t *testing.T) {
	ctx := context.Background()
	w := newEvidenceWorld(t)
	out := filepath.Join(t.TempDir(), "signed.tar.zst")
	res := w.create(t, out)

	images := map[string]artifact.Image{}
	for _, i := range res.Config.Components[0].Images {
		images[strings.TrimPrefix(i.Ref, w.host+"/sig/")+":"] = i
	}
	type want struct{ kind, subject, tag, artifactType string }
	check := func(name string, wants ...want) {
		t.Helper()
		sigs := images[name+":1.0:"].Signatures
		if len(sigs) != len(wants) {
			t.Fatalf("%s: %d signatures, want %d: %+v", name, len(sigs), len(wants), sigs)
		}
		for i, g := range sigs {
			found := false
			for _, wt := range wants {
				found = found || (g.Kind == wt.kind && g.Subject.String() == wt.subject && g.Tag == wt.tag && g.ArtifactType == wt.artifactType && g.Size > 0)
			}
			if !found {
				t.Errorf("%s signature %d: %+v, want one of %+v", name, i, g, wants)
			}
		}
	}
	tag := func(d digest.Digest, s string) string { return artifact.CosignTag(d, s) }
	check("signed",
		want{imagesig.KindSignature, w.signed.String(), tag(w.signed, ".sig"), ""},
		want{imagesig.KindAttestation, w.signed.String(), tag(w.signed, ".att"), ""})
	check("referred", want{imagesig.KindSignature, w.referred.String(), "", artifact.ArtifactTypeCosignSignature})
	check("bundled", want{imagesig.KindBundle, w.bundled.String(), "", "application/vnd.dev.sigstore.bundle.v0.3+json"})
	check("plain")
	check("multi", want{imagesig.KindSignature, w.multi.String(), tag(w.multi, ".sig"), ""})
	if m := images["multi:1.0:"]; m.Digest != w.multiAMD64 || m.OriginalDigest != w.multi {
		t.Fatalf("multi: stored %s (original %s), want the amd64 manifest %s of %s", m.Digest, m.OriginalDigest, w.multiAMD64, w.multi)
	}

	// The root lists each, and the carrier of multi's original index.
	a := loadArchive(t, out)
	root := a.index0(t, a.root)
	var sigEntries, carriers int
	for _, e := range root.Manifests {
		if e.Annotations[artifact.AnnotationKind] != artifact.KindImageSignature {
			continue
		}
		if d := e.Annotations[artifact.AnnotationSignedIndex]; d != "" {
			carriers++
			m := a.manifest(t, e.Digest)
			if d != w.multi.String() || len(m.Layers) != 1 || m.Layers[0].Digest != w.multi || m.Subject.Digest != w.multiAMD64 {
				t.Errorf("the signed-index carrier: %s %+v", d, m)
			}
			if got := digest.FromBytes(a.blob(t, w.multi)); got != w.multi {
				t.Errorf("the carried index is %s", got)
			}
			continue
		}
		sigEntries++
		if e.Annotations[artifact.AnnotationSignatureSubject] == "" || e.Annotations[artifact.AnnotationComponent] != "app" {
			t.Errorf("entry %s: annotations %v", e.Digest, e.Annotations)
		}
	}
	if sigEntries != 5 || carriers != 1 {
		t.Fatalf("root: %d signature entries and %d carriers, want 5 and 1", sigEntries, carriers)
	}
	rep, err := artifact.Inspect(ctx, openPkg(t, out), "", nil)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if n := len(rep.Components[0].Images[0].Signatures); n != 2 {
		t.Fatalf("inspect reports %d signatures of signed", n)
	}

	// Mirrored, cosign verifies the copies: tag scheme, attestation, referrer.
	mirror := registrytest.New(t)
	if _, err := artifact.Mirror(ctx, openPkg(t, out), mirror, artifact.MirrorOptions{}); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	// The package in the registry reads clean, and pulls.
	if rep, err := inspectRemote(ctx, mirror+"/signed:1.0.0"); err != nil || len(rep.Components[0].Images[0].Signatures) != 2 {
		t.Fatalf("inspect in the registry: %v", err)
	}
	pulled := filepath.Join(t.TempDir(), "pulled.tar.zst")
	if _, err := pullRemote(ctx, mirror+"/signed:1.0.0", pulled, artifact.PullOptions{}); err != nil {
		t.Fatalf("pull: %v", err)
	}
	if _, err := artifact.Inspect(ctx, openPkg(t, pulled), "", nil); err != nil {
		t.Fatalf("inspect of the pulled package: %v", err)
	}
	pub := filepath.Join(w.keys, "pub.pub")
	mref := func(name string, d digest.Digest) string {
		repo, _, err := artifact.ImagePath(w.host + "/sig/" + name + ":1.0")
		if err != nil {
			t.Fatal(err)
		}
		return mirror + "/" + repo + "@" + d.String()
	}
	if out, err := w.cosign.verify(pub, mref("signed", w.signed)); err != nil {
		t.Fatalf("cosign verify of the mirrored tag-scheme signature: %v\n%s", err, out)
	}
	if out, err := w.cosign.run("", "verify-attestation", "--key", pub, "--type", "slsaprovenance", "--insecure-ignore-tlog=true",
		"--allow-http-registry", mref("signed", w.signed)); err != nil {
		t.Fatalf("cosign verify-attestation of the mirrored attestation: %v\n%s", err, out)
	}
	w.cosign.env = []string{"COSIGN_EXPERIMENTAL=1"}
	if out, err := w.cosign.run("", "verify", "--key", pub, "--experimental-oci11", "--insecure-ignore-tlog=true",
		"--allow-http-registry", mref("referred", w.referred)); err != nil {
		t.Fatalf("cosign verify --experimental-oci11 of the mirrored referrer: %v\n%s", err, out)
	}
	w.cosign.env = nil
	writeFile(t, filepath.Join(w.keys, "root.json"), `{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`)
	if out, err := w.cosign.run("", "verify-attestation", "--key", pub, "--new-bundle-format", "--trusted-root", filepath.Join(w.keys, "root.json"),
		"--type", "slsaprovenance", "--insecure-ignore-tlog=true", "--allow-http-registry", mref("bundled", w.bundled)); err != nil {
		t.Fatalf("cosign verify-attestation --new-bundle-format of the mirrored bundle: %v\n%s", err, out)
	}
	w.cosign.must("other", "generate-key-pair", "--output-key-prefix", filepath.Join(w.keys, "other"))
	if out, err := w.cosign.run("", "verify-attestation", "--key", filepath.Join(w.keys, "other.pub"), "--new-bundle-format", "--trusted-root", filepath.Join(w.keys, "root.json"),
		"--type", "slsaprovenance", "--insecure-ignore-tlog=true", "--allow-http-registry", mref("bundled", w.bundled)); err == nil {
		t.Fatalf("cosign verify-attestation of the bundle with another key passed:\n%s", out)
	}
	if out, err := w.cosign.verify(pub, mref("plain", w.plain)); err == nil {
		t.Fatalf("cosign verify of the unsigned image passed:\n%s", out)
	}
}

// TestImageSignaturesTamper: an image-signature entry naming another
// subject, one ferry.json does not record, and a record naming a manifest
// that is no such entry are ErrCorrupt, naming the image.
func TestImageSignaturesTamper(t *testing.T) {
	ctx := context.Background()
	w := newEvidenceWorld(t)
	out := filepath.Join(t.TempDir(), "signed.tar")
	w.create(t, out)
	signedRef := w.host + "/sig/signed:1.0"
	cases := []struct {
		name string
		edit func(cfg *artifact.Config, root *ocispec.Index)
		want string
	}{
		{"wrong subject", func(_ *artifact.Config, root *ocispec.Index) {
			for _, e := range root.Manifests {
				if e.Annotations[artifact.AnnotationImageRef] == signedRef && e.Annotations[artifact.AnnotationKind] == artifact.KindImageSignature {
					e.Annotations[artifact.AnnotationSignatureSubject] = w.plain.String()
				}
			}
		}, "is not a manifest of image " + signedRef},
		{"missing from ferry.json", func(cfg *artifact.Config, _ *ocispec.Index) {
			cfg.Components[0].Images[0].Signatures = cfg.Components[0].Images[0].Signatures[1:]
		}, "is not the one ferry.json records"},
		{"recorded, not in the root", func(cfg *artifact.Config, _ *ocispec.Index) {
			img := &cfg.Components[0].Images[0]
			extra := img.Signatures[0]
			extra.Digest = w.plain
			img.Signatures = append(img.Signatures, extra)
		}, "ferry.json lists what the package does not hold: signature"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := rewriteRoot(t, loadArchive(t, out), c.edit)
			_, err := artifact.Inspect(ctx, openPkg(t, bad), "", nil)
			if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("inspect: %v, want ErrCorrupt with %q", err, c.want)
			}
			// Pushed as it is (Push does not check the root against ferry.json), the registry
			// path refuses it too.
			ref := fmt.Sprintf("%s/tampered/%d:1.0.0", w.host, i)
			if _, err := pushFile(t, bad, ref, artifact.PushOptions{}); err != nil {
				t.Fatalf("push: %v", err)
			}
			_, err = inspectRemote(ctx, ref)
			if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("inspect in the registry: %v, want ErrCorrupt with %q", err, c.want)
			}
		})
	}
}

// rewriteRoot re-makes an unsigned package with ferry.json and the root
// index edited, everything above them made consistent.
func rewriteRoot(t testing.TB, a *pkgArchive, edit func(cfg *artifact.Config, root *ocispec.Index)) string {
	t.Helper()
	var cfg artifact.Config
	if err := json.Unmarshal(a.file(t, artifact.ConfigFileName), &cfg); err != nil {
		t.Fatal(err)
	}
	root := a.index0(t, a.root)
	edit(&cfg, &root)
	replaced := map[digest.Digest][]byte{}
	cdata, _ := json.Marshal(cfg)
	pkg := a.kind(t, artifact.KindPackage)
	pm := a.manifest(t, pkg.Digest)
	replaced[pm.Config.Digest] = cdata
	pm.Config.Digest, pm.Config.Size = digest.FromBytes(cdata), int64(len(cdata))
	pdata, _ := json.Marshal(pm)
	replaced[pkg.Digest] = pdata
	for j, e := range root.Manifests {
		if e.Digest == pkg.Digest {
			root.Manifests[j].Digest, root.Manifests[j].Size = digest.FromBytes(pdata), int64(len(pdata))
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
		idx.Manifests = []ocispec.Descriptor{a.index.Manifests[0]}
		idx.Manifests[0].Digest, idx.Manifests[0].Size = newRoot, int64(len(rdata))
		setFile(t, es, "index.json", idx)
		return es
	})
}

// hostileRegistry serves one image, tagged 1.0, and under its cosign .sig
// tag the manifest sig (whose digest it claims is sigDigest); it counts the
// bytes of blobs it serves.
type hostileRegistry struct {
	image, config, layer []byte
	sig                  []byte
	sigDigest            digest.Digest
	served               atomic.Int64
}

func (h *hostileRegistry) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	imageDigest := digest.FromBytes(h.image)
	_, rest, _ := strings.Cut(r.URL.Path, "/v2/evil/app/")
	kind, ref, _ := strings.Cut(rest, "/")
	var body []byte
	var d digest.Digest
	switch {
	case kind == "manifests" && (ref == "1.0" || ref == imageDigest.String()):
		body, d = h.image, imageDigest
	case kind == "manifests" && (ref == artifact.CosignTag(imageDigest, ".sig") || ref == h.sigDigest.String()):
		body, d = h.sig, h.sigDigest
	case kind == "blobs" && ref == digest.FromBytes(h.config).String():
		body, d = h.config, digest.FromBytes(h.config)
	case kind == "blobs" && ref == digest.FromBytes(h.layer).String():
		body, d = h.layer, digest.FromBytes(h.layer)
	case kind == "blobs":
		// Any other blob: a endless stream of zeros, counted.
		rw.Header().Set("Content-Length", fmt.Sprint(int64(1<<30)))
		zeros := make([]byte, 32<<10)
		for {
			n, err := rw.Write(zeros)
			h.served.Add(int64(n))
			if err != nil || h.served.Load() >= 1<<30 {
				return
			}
		}
	default:
		http.NotFound(rw, r)
		return
	}
	if kind == "manifests" {
		rw.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
	}
	rw.Header().Set("Docker-Content-Digest", d.String())
	rw.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = rw.Write(body)
}

// TestImageSignaturesHostile: a .sig manifest naming a 1 GiB layer, whose
// bytes are not its digest, or larger than a manifest may be, fails create with one line naming the
// image, and the layer is never fetched.
func TestImageSignaturesHostile(t *testing.T) {
	mem := memory.New()
	ctx := context.Background()
	img, err := fixture.PushImage(ctx, mem, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.NewLayer(fixture.Rand(1), 1024)})
	if err != nil {
		t.Fatal(err)
	}
	read := func(d ocispec.Descriptor) []byte {
		rc, err := mem.Fetch(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return b
	}
	h := &hostileRegistry{image: read(img)}
	var m ocispec.Manifest
	if err := json.Unmarshal(h.image, &m); err != nil {
		t.Fatal(err)
	}
	h.config, h.layer = read(m.Config), read(m.Layers[0])
	huge := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: m.Config,
		Layers: []ocispec.Descriptor{{MediaType: "application/vnd.dev.cosign.simplesigning.v1+json", Digest: digest.FromString("gigabyte"), Size: 1 << 30}},
	}
	hugeData, _ := json.Marshal(huge)
	bigManifest := append(bytes.Clone(hugeData), bytes.Repeat([]byte(" "), 5<<20)...)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/evil/app:1.0"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, definition.FileName), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: evil, version: 1.0.0}
platforms: [linux/amd64]
components:
  - name: app
    images: [%s]
`, ref))
	cases := []struct {
		name      string
		sig       []byte
		sigDigest digest.Digest
		want      string
	}{
		{"1 GiB layer", hugeData, digest.FromBytes(hugeData), "1073741824 bytes, more than the 16777216"},
		{"wrong digest", hugeData, digest.FromString("another manifest"), "digest"},
		{"5 MiB manifest", bigManifest, digest.FromBytes(bigManifest), "too large for a manifest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.sig, h.sigDigest = c.sig, c.sigDigest
			def, err := definition.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "evil.tar")
			_, err = build.Create(ctx, def, build.CreateOptions{Output: out})
			if err == nil || !strings.Contains(err.Error(), "signatures of image "+ref) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("create: %v, want one line naming %s with %q", err, ref, c.want)
			}
			t.Logf("create: %v", err)
			if n := h.served.Load(); n > 0 {
				t.Fatalf("the registry served %d bytes of the hostile layer", n)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatalf("create left %s", out)
			}
		})
	}
}

// TestImageSignaturesFromLayout: from an OCI layout holding the images
// with their evidence (copied from the registry: tags, and referrers by
// oras' extended copy), create carries the same evidence.
func TestImageSignaturesFromLayout(t *testing.T) {
	ctx := context.Background()
	w := newEvidenceWorld(t)
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"signed", "referred", "bundled", "plain"} {
		repo := remoteRepo(t, w.host+"/sig/"+name+":1.0")
		if _, err := oras.ExtendedCopy(ctx, repo, "1.0", store, name, oras.DefaultExtendedCopyOptions); err != nil {
			t.Fatal(err)
		}
	}
	repo := remoteRepo(t, w.host+"/sig/signed:1.0")
	for _, s := range []string{".sig", ".att"} {
		tag := artifact.CosignTag(w.signed, s)
		if _, err := oras.Copy(ctx, repo, tag, store, tag, oras.DefaultCopyOptions); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, definition.FileName), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: signed, version: 1.0.0}
platforms: [linux/amd64]
components:
  - name: app
    images:
      - {ref: example.com/sig/signed:1.0, layout: images, tag: signed}
      - {ref: example.com/sig/referred:1.0, layout: images, tag: referred}
      - {ref: example.com/sig/bundled:1.0, layout: images, tag: bundled}
      - {ref: example.com/sig/plain:1.0, layout: images, tag: plain}
`)
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "layout.tar")
	fromLayout, err := build.Create(ctx, def, build.CreateOptions{Output: out})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	fromRegistry := w.create(t, filepath.Join(t.TempDir(), "registry.tar"))
	for i, img := range fromLayout.Config.Components[0].Images {
		got, _ := json.Marshal(img.Signatures)
		want, _ := json.Marshal(fromRegistry.Config.Components[0].Images[i].Signatures)
		if string(got) != string(want) {
			t.Errorf("%s from the layout: %s, from the registry %s", img.Ref, got, want)
		}
	}
	if _, err := artifact.Inspect(ctx, openPkg(t, out), "", nil); err != nil {
		t.Fatalf("inspect: %v", err)
	}
}
