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
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// keyPair writes a fresh cosign key pair into dir as name.key/name.pub and
// loads both.
func keyPair(t testing.TB, dir, name string) (*key.Private, *artifact.PublicKey) {
	t.Helper()
	kp, err := key.Generate([]byte("pw-" + name))
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	if err := kp.WriteFiles(priv, pub); err != nil {
		t.Fatal(err)
	}
	sk, err := key.LoadPrivate(priv, []byte("pw-"+name))
	if err != nil {
		t.Fatal(err)
	}
	pk, err := artifact.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sk, pk
}

func openPkg(t testing.TB, path string) *artifact.Reader {
	t.Helper()
	r, err := artifact.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func verifyFile(path string, keys ...artifact.Verifier) (*artifact.VerifyResult, error) {
	r, err := artifact.Open(context.Background(), path)
	if err != nil {
		return nil, err
	}
	return artifact.Verify(context.Background(), r, "", artifact.VerifyOptions{Keys: keys})
}

// TestSignVerify: signing keeps the root, adds a cosign signature manifest
// under the signature tag, verifies with the key and only that key; the same
// key again changes nothing; another key adds a second signature; the
// signed archive goes through a registry byte for byte, and create
// --sign-key gives the same layout.
func TestSignVerify(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	dir := t.TempDir()
	alice, alicePub := keyPair(t, dir, "alice")
	bob, bobPub := keyPair(t, dir, "bob")
	for _, ext := range []string{".tar.zst", ".tar"} {
		t.Run(ext, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "demo"+ext)
			res := create(t, w, path)
			if _, err := verifyFile(path, alicePub); !errors.Is(err, artifact.ErrNoSignature) {
				t.Fatalf("unsigned: %v, want ErrNoSignature", err)
			}
			sr, err := artifact.Sign(ctx, openPkg(t, path), "", alice, artifact.SignOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !sr.Added || sr.Root != res.Root.Digest || sr.Signatures != 1 {
				t.Fatalf("sign: %+v", sr)
			}
			r := openPkg(t, path)
			if r.Root().Digest != res.Root.Digest || artifact.FormatFromPath(path) != formatOf(t, path) {
				t.Fatalf("signing changed the root or the format")
			}
			var tags []string
			for _, d := range r.Index().Manifests {
				tags = append(tags, d.Annotations[ocispec.AnnotationRefName])
			}
			if want := []string{"1.0.0", artifact.SignatureTag(res.Root.Digest)}; strings.Join(tags, " ") != strings.Join(want, " ") {
				t.Fatalf("index.json tags %q, want %q", tags, want)
			}
			vr, err := verifyFile(path, alicePub)
			if err != nil || len(vr.Signatures) != 1 || vr.Report.Root != res.Root.Digest {
				t.Fatalf("verify: %+v %v", vr, err)
			}
			if _, err := verifyFile(path, bobPub); !errors.Is(err, artifact.ErrSignature) || !strings.Contains(err.Error(), "signed by another key") {
				t.Fatalf("verify with another key: %v", err)
			}
			before, _ := os.ReadFile(path)
			again, err := artifact.Sign(ctx, openPkg(t, path), "", alice, artifact.SignOptions{})
			if err != nil || again.Added {
				t.Fatalf("re-sign with the same key: %+v %v", again, err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Fatal("re-signing with the same key changed the archive")
			}
			if sr, err := artifact.Sign(ctx, openPkg(t, path), "", bob, artifact.SignOptions{}); err != nil || !sr.Added || sr.Signatures != 2 {
				t.Fatalf("sign with a second key: %+v %v", sr, err)
			}
			for _, k := range []artifact.Verifier{alicePub, bobPub} {
				if _, err := verifyFile(path, k); err != nil {
					t.Fatalf("after a second signature, %s: %v", k.KeyName(), err)
				}
			}

			// Through a registry: push carries the signature, pull gives the same bytes.
			ref := w.Host + "/signed/demo" + strings.ReplaceAll(ext, ".", "-") + ":1.0.0"
			if _, err := pushFile(t, path, ref, artifact.PushOptions{}); err != nil {
				t.Fatal(err)
			}
			assertPullIdentical(t, ref, path)
			if _, err := verifyRemote(ctx, ref, artifact.VerifyOptions{Keys: []artifact.Verifier{bobPub}}); err != nil {
				t.Fatalf("verify remote: %v", err)
			}
		})
	}

	// create --sign-key: the same root, signed from the start.
	signed := filepath.Join(t.TempDir(), "signed.tar")
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: signed, SignKey: alice})
	if err != nil {
		t.Fatal(err)
	}
	if vr, err := verifyFile(signed, alicePub); err != nil || vr.Report.Root != cr.Root.Digest {
		t.Fatalf("create --sign-key: %v", err)
	}
}

func formatOf(t testing.TB, path string) artifact.Format {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		return artifact.FormatTarZstd
	}
	return artifact.FormatTar
}

// TestSignLayoutDir signs an extracted layout folder twice and verifies it.
func TestSignLayoutDir(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	keys := t.TempDir()
	alice, alicePub := keyPair(t, keys, "alice")
	bob, bobPub := keyPair(t, keys, "bob")
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar"))
	dir := extractLayout(t, res.Path)
	for _, k := range []*key.Private{alice, bob} {
		if _, err := artifact.Sign(ctx, openPkg(t, dir), "", k, artifact.SignOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	vr, err := verifyFile(dir, alicePub, bobPub)
	if err != nil || len(vr.Signatures) != 2 {
		t.Fatalf("verify layout: %+v %v", vr, err)
	}
	// The first signature manifest was replaced and its blobs removed.
	entries, _ := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if len(entries) != vr.Report.Blobs {
		t.Fatalf("%d blob files, the graph has %d", len(entries), vr.Report.Blobs)
	}
}

// pkgArchive is an uncompressed package archive opened for tampering.
type pkgArchive struct {
	entries []tarEntry
	root    digest.Digest
	index   ocispec.Index
}

func loadArchive(t testing.TB, path string) *pkgArchive {
	t.Helper()
	a := &pkgArchive{entries: readTar(t, path)}
	if err := json.Unmarshal(a.file(t, "index.json"), &a.index); err != nil {
		t.Fatal(err)
	}
	a.root = a.index.Manifests[0].Digest
	return a
}

func (a *pkgArchive) file(t testing.TB, name string) []byte {
	for _, e := range a.entries {
		if e.Header.Name == name {
			return e.Data
		}
	}
	t.Fatalf("no entry %s", name)
	return nil
}

func (a *pkgArchive) blob(t testing.TB, d digest.Digest) []byte {
	return a.file(t, "blobs/sha256/"+d.Encoded())
}

func (a *pkgArchive) index0(t testing.TB, d digest.Digest) ocispec.Index {
	var idx ocispec.Index
	if err := json.Unmarshal(a.blob(t, d), &idx); err != nil {
		t.Fatal(err)
	}
	return idx
}

func (a *pkgArchive) manifest(t testing.TB, d digest.Digest) ocispec.Manifest {
	var m ocispec.Manifest
	if err := json.Unmarshal(a.blob(t, d), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// kind returns the root entry of the given kind.
func (a *pkgArchive) kind(t testing.TB, kind string) ocispec.Descriptor {
	for _, m := range a.index0(t, a.root).Manifests {
		if m.Annotations[artifact.AnnotationKind] == kind {
			return m
		}
	}
	t.Fatalf("no %s in the root", kind)
	return ocispec.Descriptor{}
}

// write saves the archive with fn applied to a copy of its entries.
func (a *pkgArchive) write(t testing.TB, fn func([]tarEntry) []tarEntry) string {
	t.Helper()
	cp := make([]tarEntry, len(a.entries))
	for i, e := range a.entries {
		cp[i] = tarEntry{e.Header, append([]byte(nil), e.Data...)}
	}
	p := filepath.Join(t.TempDir(), "tampered.tar")
	writeTar(t, p, fn(cp))
	return p
}

func flip(d digest.Digest) func([]tarEntry) []tarEntry {
	return func(es []tarEntry) []tarEntry {
		for i, e := range es {
			if e.Header.Name == "blobs/sha256/"+d.Encoded() {
				es[i].Data[len(e.Data)/2] ^= 1
			}
		}
		return es
	}
}

// TestVerifyTamper: every kind of damage is caught, with its own message.
func TestVerifyTamper(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	keys := t.TempDir()
	alice, alicePub := keyPair(t, keys, "alice")
	mallory, _ := keyPair(t, keys, "mallory")

	good := filepath.Join(t.TempDir(), "good.tar")
	create(t, w, good)
	unsigned := loadArchive(t, good)
	if _, err := artifact.Sign(ctx, openPkg(t, good), "", alice, artifact.SignOptions{}); err != nil {
		t.Fatal(err)
	}
	a := loadArchive(t, good)
	sigDesc := a.index.Manifests[1]
	sigManifest := a.manifest(t, sigDesc.Digest)
	image := a.kind(t, artifact.KindImage)
	imageManifest := a.manifest(t, image.Digest)
	chartM := a.manifest(t, a.kind(t, artifact.KindChart).Digest)
	pkg := a.kind(t, artifact.KindPackage)

	// A package signed by mallory only.
	byMallory := filepath.Join(t.TempDir(), "mallory.tar")
	writeTar(t, byMallory, unsigned.entries)
	if _, err := artifact.Sign(ctx, openPkg(t, byMallory), "", mallory, artifact.SignOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another package (other version, so another root) signed by alice:
	// its signature manifest copied into ours under our signature tag.
	other := filepath.Join(t.TempDir(), "other.tar")
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	def.Metadata.Version = "2.0.0"
	if _, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: other, SignKey: alice}); err != nil {
		t.Fatal(err)
	}
	o := loadArchive(t, other)
	copied := a.write(t, func(es []tarEntry) []tarEntry {
		// Drop our signature blobs, add the other package's, point index.json at them.
		var out []tarEntry
		ours := map[string]bool{"blobs/sha256/" + sigDesc.Digest.Encoded(): true, "blobs/sha256/" + sigManifest.Config.Digest.Encoded(): true}
		for _, l := range sigManifest.Layers {
			ours["blobs/sha256/"+l.Digest.Encoded()] = true
		}
		for _, e := range es {
			if !ours[e.Header.Name] {
				out = append(out, e)
			}
		}
		od := o.index.Manifests[1]
		om := o.manifest(t, od.Digest)
		for _, d := range append([]ocispec.Descriptor{om.Config}, append(om.Layers, od)...) {
			h := *es[len(es)-1].Header
			h.Name = "blobs/sha256/" + d.Digest.Encoded()
			out = append(out, tarEntry{&h, o.blob(t, d.Digest)})
		}
		idx := a.index
		idx.Manifests = []ocispec.Descriptor{a.index.Manifests[0], od}
		idx.Manifests[1].Annotations = map[string]string{ocispec.AnnotationRefName: artifact.SignatureTag(a.root)}
		setFile(t, out, "index.json", idx)
		return out
	})
	// A signature annotation that is not base64, in a re-made manifest.
	badB64 := rewriteSignature(t, a, func(m *ocispec.Manifest) {
		m.Layers[0].Annotations[artifact.AnnotationCosignSignature] = "!!not base64!!"
	})
	notDER := rewriteSignature(t, a, func(m *ocispec.Manifest) {
		m.Layers[0].Annotations[artifact.AnnotationCosignSignature] = "aGVsbG8gd29ybGQ="
	})

	cases := []struct {
		name, path string
		is         error
		want       string
	}{
		{"layer", a.write(t, flip(imageManifest.Layers[0].Digest)), artifact.ErrCorrupt, "blob " + imageManifest.Layers[0].Digest.String() + " does not match its digest"},
		{"image config", a.write(t, flip(imageManifest.Config.Digest)), artifact.ErrCorrupt, "blob " + imageManifest.Config.Digest.String() + " does not match its digest"},
		{"image manifest", a.write(t, flip(image.Digest)), artifact.ErrCorrupt, "blob " + image.Digest.String() + " does not match its digest"},
		{"chart", a.write(t, flip(chartM.Layers[0].Digest)), artifact.ErrCorrupt, "blob " + chartM.Layers[0].Digest.String() + " does not match its digest"},
		{"package manifest", a.write(t, flip(pkg.Digest)), artifact.ErrCorrupt, "blob " + pkg.Digest.String() + " does not match its digest"},
		{"root index", a.write(t, flip(a.root)), artifact.ErrCorrupt, "blob " + a.root.String() + " does not match its digest"},
		{"signature manifest", a.write(t, flip(sigDesc.Digest)), artifact.ErrCorrupt, "blob " + sigDesc.Digest.String() + " does not match its digest"},
		{"signature payload", a.write(t, flip(sigManifest.Layers[0].Digest)), artifact.ErrCorrupt, "blob " + sigManifest.Layers[0].Digest.String() + " does not match its digest"},
		{"blob removed", a.write(t, func(es []tarEntry) []tarEntry {
			var out []tarEntry
			for _, e := range es {
				if e.Header.Name != "blobs/sha256/"+imageManifest.Layers[0].Digest.Encoded() {
					out = append(out, e)
				}
			}
			return out
		}), artifact.ErrCorrupt, "blob " + imageManifest.Layers[0].Digest.String() + " missing"},
		{"another key", byMallory, artifact.ErrSignature, "signed by another key"},
		{"signature over another digest", copied, artifact.ErrSignature, "is over " + o.root.String() + ", not the package root " + a.root.String()},
		{"no signature", good2(t, unsigned), artifact.ErrNoSignature, "no signature over the package root " + a.root.String()},
		{"signature not base64", badB64, artifact.ErrSignature, "bad signature 1: not base64"},
		{"signature not DER", notDER, artifact.ErrSignature, "bad signature 1: not a well-formed ECDSA signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := verifyFile(c.path, alicePub)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %v containing %q", err, c.is, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	if _, err := verifyFile(good, alicePub); err != nil {
		t.Fatalf("the untampered package: %v", err)
	}
}

// good2 writes the unsigned archive back out.
func good2(t testing.TB, a *pkgArchive) string {
	return a.write(t, func(es []tarEntry) []tarEntry { return es })
}

func setFile(t testing.TB, es []tarEntry, name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if e.Header.Name == name {
			es[i].Data = data
			return
		}
	}
	t.Fatalf("no entry %s", name)
}

// rewriteSignature re-makes the signature manifest with edit applied, with
// consistent digests, so only the signature check can object.
func rewriteSignature(t testing.TB, a *pkgArchive, edit func(*ocispec.Manifest)) string {
	t.Helper()
	sigDesc := a.index.Manifests[1]
	m := a.manifest(t, sigDesc.Digest)
	edit(&m)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	nd := digest.FromBytes(data)
	return a.write(t, func(es []tarEntry) []tarEntry {
		for i, e := range es {
			if e.Header.Name == "blobs/sha256/"+sigDesc.Digest.Encoded() {
				h := *e.Header
				h.Name = "blobs/sha256/" + nd.Encoded()
				es[i] = tarEntry{&h, data}
			}
		}
		idx := a.index
		idx.Manifests = append([]ocispec.Descriptor(nil), a.index.Manifests...)
		idx.Manifests[1].Digest, idx.Manifests[1].Size = nd, int64(len(data))
		setFile(t, es, "index.json", idx)
		return es
	})
}

// TestKeyErrors: a wrong password, a public key as private key, a private
// key as public key and a corrupt file are each a clear ErrKey.
func TestKeyErrors(t *testing.T) {
	dir := t.TempDir()
	keyPair(t, dir, "k")
	priv, pub := filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")
	corrupt := filepath.Join(dir, "corrupt.key")
	if err := os.WriteFile(corrupt, []byte("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pub")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"wrong password", func() error { _, err := key.LoadPrivate(priv, []byte("nope")); return err }, "wrong password for " + priv},
		{"public as private", func() error { _, err := key.LoadPrivate(pub, nil); return err }, pub + " is a public key"},
		{"corrupt private", func() error { _, err := key.LoadPrivate(corrupt, nil); return err }, corrupt},
		{"private as public", func() error { _, err := artifact.LoadPublicKey(priv); return err }, priv + " is a private key"},
		{"garbage public", func() error { _, err := artifact.LoadPublicKey(garbage); return err }, garbage + " is not a PEM key file"},
		{"missing", func() error { _, err := artifact.LoadPublicKey(filepath.Join(dir, "none.pub")); return err }, "none.pub"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			if !errors.Is(err, artifact.ErrKey) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrKey containing %q", err, c.want)
			}
		})
	}
}

// TestSignatureTravelsAsReferrer: the signature manifest is also an OCI 1.1
// referrer of the root, so a copy of the root with its referrers (oras-go's
// ExtendedCopy, as `oras copy -r`; the oras CLI when installed) carries it
// and verify finds it there without the cosign tag; `oras discover` shows
// it. A copy without referrers is refused naming where ferry looked and how
// to copy the signature.
func TestSignatureTravelsAsReferrer(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	signed, _, alicePub := signedPackage(t, w, "signed.tar.zst")
	host := w.Host
	if _, err := pushFile(t, signed, host+"/pkgs/demo:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	root := openPkg(t, signed).Root().Digest.String()
	src := remoteRepo(t, host+"/pkgs/demo")
	keys := artifact.VerifyOptions{Keys: []artifact.Verifier{alicePub}}

	withReferrers := remoteRepo(t, host+"/copies/with-referrers")
	if _, err := oras.ExtendedCopy(ctx, src, root, withReferrers, root, oras.DefaultExtendedCopyOptions); err != nil {
		t.Fatal(err)
	}
	if _, err := withReferrers.Resolve(ctx, artifact.SignatureTag(digest.Digest(root))); err == nil {
		t.Fatal("the copy has the signature tag: the test would not show the referrer is used")
	}
	if _, err := verifyRemote(ctx, host+"/copies/with-referrers@"+root, keys); err != nil {
		t.Fatalf("verify of a copy with referrers: %v", err)
	}
	out := filepath.Join(t.TempDir(), "pulled.tar.zst")
	if _, err := pullRemote(ctx, host+"/copies/with-referrers@"+root, out, artifact.PullOptions{Keys: keys.Keys}); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyFile(out, alicePub); err != nil {
		t.Fatalf("the pulled copy: %v", err)
	}

	bare := remoteRepo(t, host+"/copies/bare")
	if _, err := oras.Copy(ctx, src, root, bare, root, oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	_, err := verifyRemote(ctx, host+"/copies/bare@"+root, keys)
	if !errors.Is(err, artifact.ErrNoSignature) || !errors.Is(err, artifact.ErrSignatureLeftBehind) || !strings.Contains(err.Error(), artifact.SignatureTag(digest.Digest(root))) {
		t.Fatalf("verify of a copy without the signature: %v", err)
	}

	t.Run("oras CLI", func(t *testing.T) {
		orasBin := peertool.Require(t, "oras")
		cmd := exec.Command(orasBin, "copy", "-r", "--from-plain-http", "--to-plain-http", host+"/pkgs/demo@"+root, host+"/copies/oras-cli@"+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("oras copy -r: %v\n%s", err, out)
		}
		if _, err := verifyRemote(ctx, host+"/copies/oras-cli@"+root, keys); err != nil {
			t.Fatalf("verify after oras copy -r: %v", err)
		}
		out, err := exec.Command(orasBin, "discover", "--plain-http", host+"/copies/oras-cli@"+root).CombinedOutput()
		if err != nil || !strings.Contains(string(out), artifact.ArtifactTypeSignature) {
			t.Fatalf("oras discover: %v\n%s", err, out)
		}
	})
}
