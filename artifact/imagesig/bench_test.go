package imagesig_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/internal/testsupport/imagesigtest"
)

// BenchmarkVerifyKey is one cosign key signature read from memory and
// verified: what admission pays per image without a cache.
func BenchmarkVerifyKey(b *testing.B) {
	ctx := context.Background()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	payload := simpleSigning(testSubject)
	sum := sha256.Sum256(payload)
	sig, _ := ecdsa.SignASN1(rand.Reader, key, sum[:])
	s := memory.New()
	ev := evidenceManifest(b, s, imagesig.MediaTypeSimpleSigning, payload, map[string]string{imagesig.AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}, false)
	p := keyPolicy(true, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Verify(ctx, s, testSubject, []ocispec.Descriptor{ev}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyKeylessBundle is a keyless Sigstore bundle (certificate
// chain, RFC 3161 timestamp, trusted root parsed each time) read from an
// in-process registry and verified.
func BenchmarkVerifyKeylessBundle(b *testing.B) {
	ctx := context.Background()
	host := imagesigtest.Registry(b)
	repo := imagesigtest.Repository(b, host, "app")
	ca := imagesigtest.NewCA(b, "bench fulcio")
	tsa := imagesigtest.NewTSA(b)
	img := imagesigtest.PushImage(b, host, "app", "v1", []byte("one"))
	ca.BundleReferrer(b, repo, img, imagesig.PredicateTypeCosignSign, email, issuer, tsa)
	ev := imagesigtest.Evidence(b, repo, img)
	p := keylessPolicy(imagesigtest.TrustedRoot(b, []*imagesigtest.CA{ca}, []*imagesigtest.TSA{tsa}, nil), imagesig.Identity{Issuer: issuer, Subject: email})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Verify(ctx, repo, img.Digest, ev); err != nil {
			b.Fatal(err)
		}
	}
}
