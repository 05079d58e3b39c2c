package imagesig_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/internal/testsupport/imagesigtest"
)

const (
	slsa02 = "https://slsa.dev/provenance/v0.2"
	slsa1  = "https://slsa.dev/provenance/v1"
)

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func keyPolicy(required bool, pems ...[]byte) *imagesig.Policy {
	p := &imagesig.Policy{Name: "keys", Required: required}
	for _, pem := range pems {
		p.Authorities = append(p.Authorities, imagesig.Authority{Key: &imagesig.KeyAuthority{PEM: string(pem)}})
	}
	return p
}

func wantErr(t *testing.T, what string, err, target error, reason string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
	if reason != "" && !strings.Contains(err.Error(), reason) {
		t.Fatalf("%s: %q does not say %q", what, err, reason)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("%s: reason is not one line: %q", what, err)
	}
}

// TestCosignKeys signs and attests with `cosign sign --key` and `cosign
// attest --key` (tag scheme, OCI 1.1 referrers, and the Sigstore bundle
// format) and verifies with the evidence read from the registry.
func TestCosignKeys(t *testing.T) {
	ctx := context.Background()
	cosign := imagesigtest.NewCosign(t)
	host := imagesigtest.Registry(t)
	dir := t.TempDir()
	key, _, pub := imagesigtest.KeyPair(t, dir, "publisher")
	_, _, stranger := imagesigtest.KeyPair(t, dir, "stranger")
	predicate := writeFile(t, dir, "p.json", `{"builder":{"id":"https://ci.example/builder"},"buildType":"https://example/build"}`)
	predicate1 := writeFile(t, dir, "p1.json", `{"buildDefinition":{"buildType":"https://example/build","externalParameters":{}},"runDetails":{"builder":{"id":"https://ci.example/builder"}}}`)
	repo := imagesigtest.Repository(t, host, "app")

	img := imagesigtest.PushImage(t, host, "app", "v1", []byte("one"))
	ref := imagesigtest.Ref(host, "app", img.Digest)
	cosign.Must("sign", "--key", key, "--tlog-upload=false", "--allow-http-registry", ref)
	cosign.Must("attest", "--key", key, "--predicate", predicate, "--type", "slsaprovenance", "--tlog-upload=false", "--allow-http-registry", ref)
	evidence := imagesigtest.Evidence(t, repo, img)
	if len(evidence) != 2 {
		t.Fatalf("evidence of a signed and attested image: %d manifests", len(evidence))
	}

	good := keyPolicy(true, pub)
	good.Attestations = []imagesig.Attestation{{PredicateType: slsa02}}
	res, err := good.Verify(ctx, repo, img.Digest, evidence)
	if err != nil {
		t.Fatalf("the publisher's key: %v", err)
	}
	if len(res.Signers) != 1 || !strings.HasPrefix(res.Signers[0], "key sha256:") || !slices.Contains(res.Attestations, slsa02) {
		t.Fatalf("result: %+v", res)
	}
	// Either of two keys is enough.
	if _, err := keyPolicy(true, stranger, pub).Verify(ctx, repo, img.Digest, evidence); err != nil {
		t.Fatalf("stranger or publisher: %v", err)
	}

	wrong := keyPolicy(false, stranger)
	_, err = wrong.Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "a stranger's key", err, imagesig.ErrUnverified, "signature by an unknown key")

	missingAtt := keyPolicy(true, pub)
	missingAtt.Attestations = []imagesig.Attestation{{PredicateType: slsa1}}
	_, err = missingAtt.Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "an attestation never made", err, imagesig.ErrUnverified, "attestation "+slsa1+" missing")

	// The attestation signed by a stranger does not satisfy the policy.
	img2 := imagesigtest.PushImage(t, host, "app", "v2", []byte("two"))
	ref2 := imagesigtest.Ref(host, "app", img2.Digest)
	strangerKey := filepath.Join(dir, "stranger.key")
	cosign.Must("sign", "--key", key, "--tlog-upload=false", "--allow-http-registry", ref2)
	cosign.Must("attest", "--key", strangerKey, "--predicate", predicate, "--type", "slsaprovenance", "--tlog-upload=false", "--allow-http-registry", ref2)
	_, err = good.Verify(ctx, repo, img2.Digest, imagesigtest.Evidence(t, repo, img2))
	wantErr(t, "an attestation by a stranger", err, imagesig.ErrUnverified, "attestation "+slsa02+": signature by an unknown key")

	// Unsigned: refused when required, passed (no signers) when not.
	img3 := imagesigtest.PushImage(t, host, "app", "v3", []byte("three"))
	ev3 := imagesigtest.Evidence(t, repo, img3)
	_, err = good.Verify(ctx, repo, img3.Digest, ev3)
	wantErr(t, "unsigned, required", err, imagesig.ErrNoSignature, "")
	optional := keyPolicy(false, pub)
	if res, err := optional.Verify(ctx, repo, img3.Digest, ev3); err != nil || len(res.Signers) != 0 {
		t.Fatalf("unsigned, optional: %+v %v", res, err)
	}
	// The evidence of another image does not sign this one.
	_, err = good.Verify(ctx, repo, img3.Digest, evidence)
	wantErr(t, "another image's evidence", err, imagesig.ErrNoSignature, "")

	// OCI 1.1 referrers and the Sigstore bundle format.
	// (cosign attest has no referrers mode: its attestation stays a tag.)
	for _, tc := range []struct {
		name                string
		signFlags, attFlags []string
	}{
		{"referrers", []string{"--registry-referrers-mode=oci-1-1"}, nil},
		{"bundle", []string{"--new-bundle-format"}, []string{"--new-bundle-format"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := imagesigtest.PushImage(t, host, "app", tc.name, []byte(tc.name))
			ref := imagesigtest.Ref(host, "app", img.Digest)
			c := imagesigtest.NewCosign(t)
			c.Env = []string{"COSIGN_EXPERIMENTAL=1"}
			c.Must(append([]string{"sign", "--key", key, "--tlog-upload=false", "--allow-http-registry", ref}, tc.signFlags...)...)
			c.Must(append([]string{"attest", "--key", key, "--predicate", predicate1, "--type", "slsaprovenance1", "--tlog-upload=false", "--allow-http-registry", ref}, tc.attFlags...)...)
			ev := imagesigtest.Evidence(t, repo, img)
			kinds := map[string]bool{}
			for _, d := range ev {
				kinds[d.ArtifactType] = true
			}
			t.Logf("evidence: %d manifests, artifact types %v", len(ev), kinds)
			p := keyPolicy(true, pub)
			p.Attestations = []imagesig.Attestation{{PredicateType: slsa1}}
			res, err := p.Verify(ctx, repo, img.Digest, ev)
			if err != nil {
				t.Fatalf("%d evidence manifests: %v", len(ev), err)
			}
			if len(res.Signers) != 1 || !slices.Contains(res.Attestations, slsa1) {
				t.Fatalf("result: %+v", res)
			}
			_, err = keyPolicy(true, stranger).Verify(ctx, repo, img.Digest, ev)
			wantErr(t, "a stranger's key", err, imagesig.ErrUnverified, "unknown key")
		})
	}

	// RSA and Ed25519 keys, imported into cosign.
	for _, kt := range []string{"rsa", "ed25519"} {
		t.Run(kt, func(t *testing.T) {
			var priv crypto.Signer
			var err error
			if kt == "rsa" {
				priv, err = rsa.GenerateKey(rand.Reader, 2048)
			} else {
				_, priv, err = ed25519.GenerateKey(rand.Reader)
			}
			if err != nil {
				t.Fatal(err)
			}
			der, err := x509.MarshalPKCS8PrivateKey(priv)
			if err != nil {
				t.Fatal(err)
			}
			kdir := t.TempDir()
			raw := writeFile(t, kdir, kt+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
			cosign.Must("import-key-pair", "--key", raw, "--output-key-prefix", filepath.Join(kdir, kt))
			kpub, err := os.ReadFile(filepath.Join(kdir, kt+".pub"))
			if err != nil {
				t.Fatal(err)
			}
			img := imagesigtest.PushImage(t, host, "app", kt, []byte(kt))
			ref := imagesigtest.Ref(host, "app", img.Digest)
			cosign.Must("sign", "--key", filepath.Join(kdir, kt+".key"), "--tlog-upload=false", "--allow-http-registry", ref)
			cosign.Must("attest", "--key", filepath.Join(kdir, kt+".key"), "--predicate", predicate, "--type", "slsaprovenance", "--tlog-upload=false", "--allow-http-registry", ref)
			ev := imagesigtest.Evidence(t, repo, img)
			p := keyPolicy(true, kpub)
			p.Attestations = []imagesig.Attestation{{PredicateType: slsa02}}
			if _, err := p.Verify(ctx, repo, img.Digest, ev); err != nil {
				t.Fatalf("%s key: %v", kt, err)
			}
			_, err = keyPolicy(true, pub).Verify(ctx, repo, img.Digest, ev)
			wantErr(t, "another key", err, imagesig.ErrUnverified, "unknown key")
		})
	}

	// Tampering: a payload altered in the registry (its manifest
	// re-pushed so digests agree) and a layer served other than its
	// descriptor says.
	t.Run("tampered", func(t *testing.T) {
		sigTag := strings.Replace(img.Digest.String(), ":", "-", 1) + ".sig"
		sigDesc, err := repo.Resolve(ctx, sigTag)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := content.FetchAll(ctx, repo, sigDesc)
		if err != nil {
			t.Fatal(err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		payload, err := content.FetchAll(ctx, repo, m.Layers[0])
		if err != nil {
			t.Fatal(err)
		}
		altered := bytes.Replace(payload, []byte(`"optional":null`), []byte(`"optional":{"x":"y"}`), 1)
		if bytes.Equal(altered, payload) {
			altered = append(bytes.TrimSuffix(payload, []byte("}")), []byte(`,"extra":1}`)...)
		}
		ld := content.NewDescriptorFromBytes(m.Layers[0].MediaType, altered)
		ld.Annotations = m.Layers[0].Annotations
		if err := repo.Push(ctx, ld, bytes.NewReader(altered)); err != nil {
			t.Fatal(err)
		}
		m.Layers[0] = ld
		mb, _ := json.Marshal(m)
		md := content.NewDescriptorFromBytes(sigDesc.MediaType, mb)
		if err := repo.Push(ctx, md, bytes.NewReader(mb)); err != nil {
			t.Fatal(err)
		}
		_, err = keyPolicy(true, pub).Verify(ctx, repo, img.Digest, []ocispec.Descriptor{md})
		wantErr(t, "an altered payload", err, imagesig.ErrUnverified, "")

		swapped := swapFetcher{Fetcher: repo, want: m.Layers[0].Digest.String(), give: payload}
		_, err = keyPolicy(true, pub).Verify(ctx, swapped, img.Digest, []ocispec.Descriptor{md})
		wantErr(t, "a layer served other than its descriptor", err, imagesig.ErrUnverified, "")
	})
}

// swapFetcher serves give for the blob whose digest is want.
type swapFetcher struct {
	content.Fetcher
	want string
	give []byte
}

func (s swapFetcher) Fetch(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	if d.Digest.String() == s.want {
		return io.NopCloser(bytes.NewReader(s.give)), nil
	}
	return s.Fetcher.Fetch(ctx, d)
}
