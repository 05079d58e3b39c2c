package artifact_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/imagesig"
	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore" // the verification engine, as the full binary links it
	"github.com/ferrypkg/ferry/internal/testsupport/imagesigtest"
)

// policyDef writes w's definition with imagePolicies (publisher: cosign's
// key, SLSA provenance required when attest; stranger: another key) and
// the images given, each with its verify: line.
func (w *evidenceWorld) policyDef(t *testing.T, images ...string) {
	t.Helper()
	pub, err := os.ReadFile(filepath.Join(w.keys, "pub.pub"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(w.dir, "keys", "publisher.pub"), string(pub))
	_, stranger := keyPair(t, w.keys, "stranger")
	writeFile(t, filepath.Join(w.dir, "keys", "stranger.pub"), string(stranger.PEM()))
	var b strings.Builder
	for _, img := range images {
		fmt.Fprintf(&b, "      - %s\n", img)
	}
	writeFile(t, filepath.Join(w.dir, definition.FileName), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: signed, version: 1.0.0}
platforms: [linux/amd64]
imagePolicies:
  - name: publisher
    authorities: [{key: keys/publisher.pub}]
  - name: attested
    authorities: [{key: keys/publisher.pub}]
    attestations: [{predicateType: slsaprovenance}]
  - name: stranger
    authorities: [{key: keys/stranger.pub}]
  - name: lax
    required: false
    authorities: [{key: keys/publisher.pub}]
verify: publisher
components:
  - name: app
    images:
%s`, strings.ReplaceAll(b.String(), "HOST", w.host)))
}

func (w *evidenceWorld) tryCreate(t *testing.T, out string, sign artifact.Signer) (*build.CreateResult, error) {
	t.Helper()
	def, err := definition.Load(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	return build.Create(context.Background(), def, build.CreateOptions{Output: out, SignKey: sign})
}

// TestImagePolicyAtCreate: create checks each image against the policy the
// definition names for it — signed by the key (tag scheme, OCI 1.1
// referrer, the publisher's index of which one platform is kept),
// attested, unsigned where the policy allows — and `verify --images`
// re-checks the package offline; an unsigned image, a signature by
// another key or a missing attestation is refused in one line naming the
// image, the policy and the cause, and no package is written.
func TestImagePolicyAtCreate(t *testing.T) {
	ctx := context.Background()
	w := newEvidenceWorld(t)
	pkgKey, pkgPub := keyPair(t, w.keys, "package")
	w.policyDef(t,
		"HOST/sig/signed:1.0",
		"{ref: HOST/sig/signed:1.0@"+w.signed.String()+", verify: attested}",
		"HOST/sig/referred:1.0",
		"HOST/sig/multi:1.0",
		"{ref: HOST/sig/plain:1.0, verify: lax}",
	)
	out := filepath.Join(t.TempDir(), "signed.tar.zst")
	res, err := w.tryCreate(t, out, pkgKey)
	if err != nil {
		t.Fatalf("create with every image satisfying its policy: %v", err)
	}
	if len(res.Config.ImagePolicies) != 3 {
		t.Errorf("ferry.json carries %d policies, want the 3 used (publisher, attested, lax)", len(res.Config.ImagePolicies))
	}
	vr, err := artifact.Verify(ctx, openPkg(t, out), "", artifact.VerifyOptions{Keys: artifact.Verifiers([]*artifact.PublicKey{pkgPub}), Images: true})
	if err != nil {
		t.Fatalf("verify --images: %v", err)
	}
	got := map[string]artifact.VerifiedImage{}
	for _, i := range vr.Images {
		got[i.Ref+"|"+i.Policy] = i
	}
	if len(vr.Images) != 5 {
		t.Fatalf("verify --images checked %d images, want 5: %+v", len(vr.Images), vr.Images)
	}
	for _, k := range []string{"sig/signed:1.0|publisher", "sig/referred:1.0|publisher", "sig/multi:1.0|publisher"} {
		if i := got[w.host+"/"+k]; i.Result == nil || len(i.Result.Signers) == 0 {
			t.Errorf("%s: no signer in %+v", k, i.Result)
		}
	}
	attested := got[w.host+"/sig/signed:1.0@"+w.signed.String()+"|attested"]
	if attested.Result == nil || len(attested.Result.Attestations) != 1 || attested.Result.Attestations[0] != "https://slsa.dev/provenance/v0.2" {
		t.Errorf("attested: %+v", attested.Result)
	}
	if plain := got[w.host+"/sig/plain:1.0|lax"]; plain.Result == nil || len(plain.Result.Signers) != 0 {
		t.Errorf("plain under lax: %+v", plain.Result)
	}

	refused := []struct {
		name, image string
		cause       error
		want        string
	}{
		{"unsigned, required", "HOST/sig/plain:1.0", imagesig.ErrNoSignature, `sig/plain:1.0 does not satisfy policy "publisher"`},
		{"another key", "{ref: HOST/sig/signed:1.0, verify: stranger}", imagesig.ErrUnverified, `sig/signed:1.0 does not satisfy policy "stranger"`},
		{"attestation missing", "{ref: HOST/sig/referred:1.0, verify: attested}", imagesig.ErrUnverified, `sig/referred:1.0 does not satisfy policy "attested"`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			w.policyDef(t, "HOST/sig/signed:1.0", tt.image)
			out := filepath.Join(t.TempDir(), "refused.tar.zst")
			_, err := w.tryCreate(t, out, nil)
			if !errors.Is(err, artifact.ErrImagePolicy) || !errors.Is(err, tt.cause) || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "components[0].images[1]") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v; want one line naming components[0].images[1], %q, cause %v", err, tt.want, tt.cause)
			}
			if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a refused create left %s: %v", out, serr)
			}
		})
	}

	// A key file that is not a public key is refused at create, naming it.
	writeFile(t, filepath.Join(w.dir, "keys", "publisher.pub"), "not a key")
	if _, err := w.tryCreate(t, filepath.Join(t.TempDir(), "x.tar.zst"), nil); err == nil || !strings.Contains(err.Error(), "keys/publisher.pub") {
		t.Errorf("a damaged key file: %v", err)
	}
}

// TestImagePolicyKeylessAtCreate: an image signed keyless-style (a leaf
// certificate from a local CA in Fulcio's role, the signing time proven by
// a local RFC 3161 timestamp authority) satisfies a keyless policy naming
// that identity and a trusted_root.json, at create and again by verify
// --images from the package alone (the archive is the only source); a
// policy naming another subject is refused at create.
func TestImagePolicyKeylessAtCreate(t *testing.T) {
	ctx := context.Background()
	cosign := imagesigtest.NewCosign(t)
	host := imagesigtest.Registry(t)
	dir := t.TempDir()
	ca := imagesigtest.NewCA(t, "local fulcio")
	tsa := imagesigtest.NewTSA(t)
	const subject, issuer = "release@example.com", "https://issuer.example"
	leaf := ca.Issue(t, t.TempDir(), "leaf", subject, issuer, 10*time.Minute)
	img := imagesigtest.PushImage(t, host, "keyless/app", "1.0", []byte("keyless"))
	cosign.Must("sign", "--key", leaf.KeyPath, "--certificate", leaf.CertPath, "--certificate-chain", leaf.ChainPath,
		"--tlog-upload=false", "--allow-http-registry", "--timestamp-server-url", tsa.URL, imagesigtest.Ref(host, "keyless/app", img.Digest))
	writeFile(t, filepath.Join(dir, "trusted_root.json"), string(imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, []*imagesigtest.TSA{tsa}, nil)))
	def := func(wantSubject string) {
		writeFile(t, filepath.Join(dir, definition.FileName), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: keyless, version: 1.0.0}
imagePolicies:
  - name: release
    authorities:
      - keyless:
          trustedRoot: trusted_root.json
          identities: [{issuer: %q, subject: %q}]
verify: release
components:
  - name: app
    images: [%s/keyless/app:1.0]
`, issuer, wantSubject, host))
	}
	create := func(out string, sign artifact.Signer) error {
		d, err := definition.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = build.Create(ctx, d, build.CreateOptions{Output: out, SignKey: sign})
		return err
	}

	def("someone@example.com")
	if err := create(filepath.Join(t.TempDir(), "x.tar.zst"), nil); !errors.Is(err, imagesig.ErrUnverified) || !strings.Contains(err.Error(), `policy "release"`) {
		t.Fatalf("another subject: %v", err)
	}
	def(subject)
	pkgKey, pkgPub := keyPair(t, t.TempDir(), "package")
	out := filepath.Join(t.TempDir(), "keyless.tar.zst")
	if err := create(out, pkgKey); err != nil {
		t.Fatalf("the signer's identity: %v", err)
	}
	vr, err := artifact.Verify(ctx, openPkg(t, out), "", artifact.VerifyOptions{Keys: artifact.Verifiers([]*artifact.PublicKey{pkgPub}), Images: true})
	if err != nil {
		t.Fatalf("verify --images offline: %v", err)
	}
	if len(vr.Images) != 1 || len(vr.Images[0].Result.Signers) != 1 || !strings.Contains(vr.Images[0].Result.Signers[0], subject) {
		t.Fatalf("verify --images: %+v", vr.Images)
	}
}
