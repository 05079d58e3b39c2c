package imagesig_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact/imagesig"
)

var testSubject = digest.FromString("the image")

// testPub is a public key nothing in these tests signed with.
var testPub = func() string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}()

func push(t testing.TB, s *memory.Store, mt string, data []byte) ocispec.Descriptor {
	t.Helper()
	d := content.NewDescriptorFromBytes(mt, data)
	if exists, _ := s.Exists(context.Background(), d); !exists {
		if err := s.Push(context.Background(), d, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// evidenceManifest pushes a manifest with one layer (data, media type mt,
// annotations) naming subject when withSubject.
func evidenceManifest(t testing.TB, s *memory.Store, mt string, data []byte, ann map[string]string, withSubject bool) ocispec.Descriptor {
	t.Helper()
	l := push(t, s, mt, data)
	l.Annotations = ann
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: push(t, s, "application/vnd.oci.empty.v1+json", []byte("{}")), Layers: []ocispec.Descriptor{l}}
	if withSubject {
		m.Subject = &ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: testSubject, Size: 100}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return push(t, s, ocispec.MediaTypeImageManifest, b)
}

func simpleSigning(d digest.Digest) []byte {
	return []byte(`{"critical":{"identity":{"docker-reference":"r/x"},"image":{"docker-manifest-digest":"` + d.String() + `"},"type":"cosign container image signature"},"optional":null}`)
}

func envelope(payloadType string, statement string, sigs int) []byte {
	env := map[string]any{"payloadType": payloadType, "payload": base64.StdEncoding.EncodeToString([]byte(statement))}
	var ss []map[string]string
	for range sigs {
		ss = append(ss, map[string]string{"keyid": "", "sig": base64.StdEncoding.EncodeToString([]byte("not a signature"))})
	}
	env["signatures"] = ss
	b, _ := json.Marshal(env)
	return b
}

func statementFor(d digest.Digest, predicate string) string {
	return `{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"` + predicate + `","subject":[{"name":"x","digest":{"sha256":"` + d.Encoded() + `"}}],"predicate":{}}`
}

// TestMalformedEvidence feeds Verify evidence that is broken in each way
// a hostile registry or package could break it: each is refused with a
// one-line reason, none panics.
func TestMalformedEvidence(t *testing.T) {
	ctx := context.Background()
	sig := base64.StdEncoding.EncodeToString([]byte("sig"))
	good := simpleSigning(testSubject)
	att := envelope("application/vnd.in-toto+json", statementFor(testSubject, "https://slsa.dev/provenance/v1"), 1)
	for _, tc := range []struct {
		name   string
		mt     string
		data   []byte
		ann    map[string]string
		want   error
		reason string
	}{
		{"payload not JSON", imagesig.MediaTypeSimpleSigning, []byte("{"), map[string]string{imagesig.AnnotationSignature: sig}, imagesig.ErrUnverified, "signature payload"},
		{"signature not base64", imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: "%%%"}, imagesig.ErrUnverified, "signature annotation"},
		{"no signature", imagesig.MediaTypeSimpleSigning, good, nil, imagesig.ErrUnverified, "signature annotation"},
		{"bad signature", imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: sig}, imagesig.ErrUnverified, "unknown key"},
		{"names another image", imagesig.MediaTypeSimpleSigning, simpleSigning(digest.FromString("other")), map[string]string{imagesig.AnnotationSignature: sig}, imagesig.ErrUnverified, "names another image"},
		{"certificate garbage", imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: sig, imagesig.AnnotationCertificate: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}, imagesig.ErrUnverified, "certificate"},
		{"rekor bundle garbage", imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: sig, imagesig.AnnotationBundle: `{"Payload":{"body":"e30=","logID":"zz"}}`}, imagesig.ErrUnverified, "transparency log"},
		{"rekor body garbage", imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: sig, imagesig.AnnotationBundle: `{"Payload":{"body":"eyJraW5kIjoiaGFzaGVkcmVrb3JkIiwiYXBpVmVyc2lvbiI6IjAuMC4xIiwic3BlYyI6e319","logID":"00"}}`}, imagesig.ErrUnverified, "transparency log"},
		{"timestamp garbage", imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: sig, imagesig.AnnotationTimestamp: `{"SignedRFC3161Timestamp":"AAAA"}`}, imagesig.ErrUnverified, "unknown key"},
		{"envelope not JSON", imagesig.MediaTypeDSSE, []byte("["), nil, imagesig.ErrUnverified, "DSSE envelope"},
		{"envelope of another type", imagesig.MediaTypeDSSE, envelope("text/plain", "x", 1), nil, imagesig.ErrUnverified, "not an in-toto statement"},
		{"envelope of a 1 MiB type", imagesig.MediaTypeDSSE, envelope(string(bytes.Repeat([]byte("a"), 1<<20)), "x", 1), nil, imagesig.ErrUnverified, "not an in-toto statement"},
		{"statement not JSON", imagesig.MediaTypeDSSE, envelope("application/vnd.in-toto+json", "{", 1), nil, imagesig.ErrUnverified, "in-toto statement"},
		{"two signatures", imagesig.MediaTypeDSSE, envelope("application/vnd.in-toto+json", statementFor(testSubject, "p"), 2), nil, imagesig.ErrUnverified, "2 signatures"},
		{"attestation by nobody", imagesig.MediaTypeDSSE, att, nil, imagesig.ErrNoSignature, ""},
		{"bundle garbage", imagesig.MediaTypeBundle, []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`), nil, imagesig.ErrUnverified, "Sigstore bundle"},
		{"bundle not JSON", imagesig.MediaTypeBundle, []byte(`{{`), nil, imagesig.ErrUnverified, "Sigstore bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memory.New()
			// As a referrer (naming the subject) and as a tag-scheme
			// manifest (naming nothing), required or not.
			for _, withSubject := range []bool{true, false} {
				ev := evidenceManifest(t, s, tc.mt, tc.data, tc.ann, withSubject)
				for _, required := range []bool{true, false} {
					p := &imagesig.Policy{Name: "p", Required: required, Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: testPub}}}}
					res, err := p.Verify(ctx, s, testSubject, []ocispec.Descriptor{ev})
					if tc.want == imagesig.ErrNoSignature && !required {
						if err != nil || len(res.Signers) != 0 {
							t.Fatalf("optional: %+v %v", res, err)
						}
						continue
					}
					if tc.name == "names another image" && !withSubject {
						// A .sig manifest of another image: not evidence here.
						if required {
							wantErr(t, tc.name, err, imagesig.ErrNoSignature, "")
						} else if err != nil {
							t.Fatal(err)
						}
						continue
					}
					wantErr(t, tc.name, err, tc.want, tc.reason)
					if len(err.Error()) > 512 {
						t.Fatalf("%s: a refusal of %d bytes: %.200q", tc.name, len(err.Error()), err)
					}
				}
			}
		})
	}

	// Descriptors that lie or exceed the bounds.
	s := memory.New()
	real := evidenceManifest(t, s, imagesig.MediaTypeSimpleSigning, good, map[string]string{imagesig.AnnotationSignature: sig}, true)
	p := &imagesig.Policy{Name: "p", Required: true, Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: testPub}}}}
	for _, tc := range []struct {
		name string
		desc ocispec.Descriptor
	}{
		{"manifest too large", ocispec.Descriptor{MediaType: real.MediaType, Digest: real.Digest, Size: imagesig.MaxManifestSize + 1}},
		{"manifest size lies", ocispec.Descriptor{MediaType: real.MediaType, Digest: real.Digest, Size: real.Size - 1}},
		{"manifest digest lies", ocispec.Descriptor{MediaType: real.MediaType, Digest: digest.FromString("x"), Size: real.Size}},
		{"manifest digest malformed", ocispec.Descriptor{MediaType: real.MediaType, Digest: "sha256:zz", Size: real.Size}},
		{"manifest digest unknown algorithm", ocispec.Descriptor{MediaType: real.MediaType, Digest: "md5:00", Size: real.Size}},
		{"negative size", ocispec.Descriptor{MediaType: real.MediaType, Digest: real.Digest, Size: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Verify(ctx, s, testSubject, []ocispec.Descriptor{tc.desc})
			wantErr(t, tc.name, err, imagesig.ErrUnverified, "manifest")
		})
	}
	// A layer whose descriptor lies about its size.
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, Subject: &ocispec.Descriptor{Digest: testSubject},
		Layers: []ocispec.Descriptor{{MediaType: imagesig.MediaTypeSimpleSigning, Digest: digest.FromBytes(good), Size: imagesig.MaxLayerSize + 1}}}
	b, _ := json.Marshal(m)
	_, err := p.Verify(ctx, s, testSubject, []ocispec.Descriptor{push(t, s, ocispec.MediaTypeImageManifest, b)})
	wantErr(t, "layer too large", err, imagesig.ErrUnverified, "layer")

	// Invalid policies are refused before anything is read.
	for _, bad := range []imagesig.Policy{
		{Name: "none"},
		{Name: "both", Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: testPub}, Keyless: &imagesig.KeylessAuthority{}}}},
		{Name: "neither", Authorities: []imagesig.Authority{{}}},
		{Name: "bad key", Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: "x"}}}},
		{Name: "no root", Authorities: []imagesig.Authority{{Keyless: &imagesig.KeylessAuthority{Identities: []imagesig.Identity{{Issuer: "i", Subject: "s"}}}}}},
		{Name: "bad root", Authorities: []imagesig.Authority{{Keyless: &imagesig.KeylessAuthority{Identities: []imagesig.Identity{{Issuer: "i", Subject: "s"}}, TrustedRoot: []byte(`{"x":1}`)}}}},
		{Name: "attestation", Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: testPub}}}, Attestations: []imagesig.Attestation{{}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("policy %q validated", bad.Name)
		} else if _, verr := bad.Verify(ctx, s, testSubject, nil); verr == nil || errors.Is(verr, imagesig.ErrNoSignature) {
			t.Errorf("policy %q: Verify %v", bad.Name, verr)
		}
	}
}

// FuzzEvidence verifies arbitrary layer bytes and annotations as each
// kind of evidence: never a panic, never a pass.
func FuzzEvidence(f *testing.F) {
	sig := base64.StdEncoding.EncodeToString([]byte("sig"))
	f.Add(uint8(0), simpleSigning(testSubject), sig, "", "", "")
	f.Add(uint8(1), envelope("application/vnd.in-toto+json", statementFor(testSubject, "p"), 1), "", "", "", "")
	f.Add(uint8(2), []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{},"dsseEnvelope":{}}`), "", "", "", "")
	f.Add(uint8(0), simpleSigning(testSubject), sig, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", `{"SignedEntryTimestamp":"AA==","Payload":{"body":"e30=","integratedTime":1,"logIndex":1,"logID":"00"}}`, `{"SignedRFC3161Timestamp":"MAA="}`)
	mts := []string{imagesig.MediaTypeSimpleSigning, imagesig.MediaTypeDSSE, imagesig.MediaTypeBundle}
	key := &imagesig.Policy{Name: "k", Required: true, Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: testPub}}}}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte, sigAnn, certAnn, bundleAnn, tsAnn string) {
		s := memory.New()
		ann := map[string]string{imagesig.AnnotationSignature: sigAnn, imagesig.AnnotationCertificate: certAnn,
			imagesig.AnnotationBundle: bundleAnn, imagesig.AnnotationTimestamp: tsAnn}
		ev := evidenceManifest(t, s, mts[int(kind)%len(mts)], data, ann, kind&4 != 0)
		res, err := key.Verify(context.Background(), s, testSubject, []ocispec.Descriptor{ev})
		if err == nil {
			t.Fatalf("fuzzed evidence verified: %+v", res)
		}
	})
}

// TestEvidenceBound: only the first MaxEvidence manifests are read.
func TestEvidenceBound(t *testing.T) {
	ctx := context.Background()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	p := keyPolicy(true, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	s := memory.New()
	signed := func(d digest.Digest) ocispec.Descriptor {
		payload := simpleSigning(d)
		sum := sha256.Sum256(payload)
		sig, _ := ecdsa.SignASN1(rand.Reader, key, sum[:])
		return evidenceManifest(t, s, imagesig.MediaTypeSimpleSigning, payload, map[string]string{imagesig.AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}, false)
	}
	var others []ocispec.Descriptor
	for i := range imagesig.MaxEvidence - 1 {
		others = append(others, signed(digest.FromString(fmt.Sprint("other ", i))))
	}
	mine := signed(testSubject)
	if _, err := p.Verify(ctx, s, testSubject, append(slices.Clone(others), mine)); err != nil {
		t.Fatalf("the last evidence within the bound: %v", err)
	}
	_, err := p.Verify(ctx, s, testSubject, append(append(slices.Clone(others), signed(digest.FromString("one more"))), mine))
	wantErr(t, "evidence past the bound", err, imagesig.ErrNoSignature, "")
}

// TestPolicyCheckNamesLongStringsInShort: a policy as ferry.json carries
// it, with a name, an authority name or an identity regexp of 1 MiB, is
// refused in at most 512 bytes that still name what is wrong.
func TestPolicyCheckNamesLongStringsInShort(t *testing.T) {
	long := string(bytes.Repeat([]byte("a"), 1<<20))
	keyless := func(re string) *imagesig.KeylessAuthority {
		return &imagesig.KeylessAuthority{TrustedRoot: json.RawMessage(`{}`), Identities: []imagesig.Identity{{Issuer: "i", SubjectRegExp: re}}}
	}
	for _, tc := range []struct {
		name string
		p    imagesig.Policy
		want string
	}{
		{"policy name", imagesig.Policy{Name: long}, `policy "aaaa`},
		{"authority name", imagesig.Policy{Name: "p", Authorities: []imagesig.Authority{{Name: long}}}, "neither key nor keyless"},
		{"regexp", imagesig.Policy{Name: "p", Authorities: []imagesig.Authority{{Keyless: keyless("(" + long)}}}, "identity regexp: missing closing )"},
	} {
		err := tc.p.Check()
		if err == nil || len(err.Error()) > 512 || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%s: %.200v, want at most 512 bytes naming %q", tc.name, err, tc.want)
		}
	}
}
