// Package imagesigtest makes signed image evidence for tests: an
// in-process registry, a small image pushed to it, the real cosign CLI run
// offline, a local certificate authority issuing Fulcio-style leaf
// certificates, an RFC 3161 timestamp authority on loopback, a local
// transparency log's signed entry timestamps, and the Sigstore trusted
// root naming them.
//
// Importing it links the verification engine
// (github.com/ferrypkg/ferry/artifact/imagesig/sigstore), so tests that use
// these helpers can call imagesig.Policy.Verify. It is for tests only: keys are weak in their handling (files in
// t.TempDir, fixed passwords) and nothing is hardened.
package imagesigtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/digitorus/timestamp"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"google.golang.org/protobuf/encoding/protojson"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore" // the engine of imagesig.Policy.Verify
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
)

// Password protects every private key this package writes.
const Password = "imagesigtest"

// Registry runs an in-memory registry on loopback for the test and
// returns its host (127.0.0.1:port).
func Registry(t testing.TB) string {
	t.Helper()
	srv, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

// Repository is an oras repository of host over plain HTTP.
func Repository(t testing.TB, host, repo string) *remote.Repository {
	t.Helper()
	r, err := remote.NewRepository(host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	return r
}

// PushImage pushes a one-layer image holding data to host/repo:tag and
// returns its manifest descriptor.
func PushImage(t testing.TB, host, repo, tag string, data []byte) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	r := Repository(t, host, repo)
	push := func(mt string, b []byte) ocispec.Descriptor {
		d := content.NewDescriptorFromBytes(mt, b)
		if err := r.Push(ctx, d, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	config := push(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`))
	layer := push(ocispec.MediaTypeImageLayer, data)
	m, err := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: config, Layers: []ocispec.Descriptor{layer}})
	if err != nil {
		t.Fatal(err)
	}
	d := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, m)
	if err := r.PushReference(ctx, d, bytes.NewReader(m), tag); err != nil {
		t.Fatal(err)
	}
	return d
}

// Evidence lists what names subject in repo: its referrers and the
// cosign tags (sha256-<hex>.sig, .att).
func Evidence(t testing.TB, r *remote.Repository, subject ocispec.Descriptor) []ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	var out []ocispec.Descriptor
	if err := r.Referrers(ctx, subject, "", func(rs []ocispec.Descriptor) error {
		out = append(out, rs...)
		return nil
	}); err != nil {
		t.Fatalf("referrers of %s: %v", subject.Digest, err)
	}
	for _, suffix := range []string{".sig", ".att"} {
		tag := strings.Replace(subject.Digest.String(), ":", "-", 1) + suffix
		d, err := r.Resolve(ctx, tag)
		if err == nil {
			out = append(out, d)
		} else if !isNotFound(err) {
			t.Fatalf("resolve %s: %v", tag, err)
		}
	}
	return out
}

func isNotFound(err error) bool { return errors.Is(err, errdef.ErrNotFound) }

// Cosign runs the real cosign binary offline: a private HOME, the key
// password in COSIGN_PASSWORD.
type Cosign struct {
	// Env is added to cosign's environment, after (over) the defaults.
	Env  []string
	t    testing.TB
	bin  string
	home string
}

// NewCosign finds the cosign CLI (peertool.Require: skipped, or failed
// under FERRY_REQUIRE_TOOLS=1, when absent).
func NewCosign(t testing.TB) *Cosign {
	return &Cosign{t: t, bin: peertool.Require(t, "cosign"), home: t.TempDir()}
}

// Run runs cosign with args, Password as the key password.
func (c *Cosign) Run(args ...string) (string, error) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.home
	cmd.Env = append(os.Environ(), "HOME="+c.home, "COSIGN_PASSWORD="+Password, "DOCKER_CONFIG="+filepath.Join(c.home, ".docker"),
		"TUF_ROOT="+filepath.Join(c.home, ".sigstore"), "COSIGN_EXPERIMENTAL=0", "COSIGN_YES=true")
	cmd.Env = append(cmd.Env, c.Env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Must runs cosign and fails the test when it fails.
func (c *Cosign) Must(args ...string) string {
	c.t.Helper()
	out, err := c.Run(args...)
	if err != nil {
		c.t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// KeyPair writes a cosign key pair (prefix.key encrypted with Password,
// prefix.pub) in dir and returns their paths and the public key PEM.
func KeyPair(t testing.TB, dir, prefix string) (keyPath, pubPath string, pub []byte) {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(Password), nil })
	if err != nil {
		t.Fatal(err)
	}
	keyPath, pubPath = filepath.Join(dir, prefix+".key"), filepath.Join(dir, prefix+".pub")
	if err := os.WriteFile(keyPath, kb.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, kb.PublicBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return keyPath, pubPath, kb.PublicBytes
}

// CA is a local certificate authority in the role of Fulcio.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func selfSigned(t testing.TB, name string, eku []x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"imagesigtest"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           eku,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// NewCA makes a self-signed root CA.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	c, k := selfSigned(t, name, []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning})
	return &CA{Cert: c, PEM: certPEM(c.Raw), key: k}
}

// Fulcio's OIDC issuer extensions: the deprecated raw string (.1.1) and
// the DER UTF8String one (.1.8).
var (
	oidIssuerV1 = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}
	oidIssuerV2 = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}
)

// Leaf is a signing identity: a cosign key pair and the certificate the
// CA issued for it.
type Leaf struct {
	KeyPath, PubPath, CertPath, ChainPath string
	Cert                                  *x509.Certificate
}

// Issue writes, in dir, a cosign key pair (prefix.key, prefix.pub) and a
// certificate for it with Fulcio's shape: code signing, a SAN that is an
// email when subject has an @ and a URI otherwise, the OIDC issuer in both
// issuer extensions (none when issuer is empty), valid from now-1m for
// validity. The chain file holds the CA certificate.
func (ca *CA) Issue(t testing.TB, dir, prefix, subject, issuer string, validity time.Duration) *Leaf {
	t.Helper()
	keyPath, pubPath, pubPEM := KeyPair(t, dir, prefix)
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.certify(pub, subject, issuer, validity)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{KeyPath: keyPath, PubPath: pubPath, CertPath: filepath.Join(dir, prefix+".crt"), ChainPath: filepath.Join(dir, prefix+"-chain.crt"), Cert: cert}
	if err := os.WriteFile(l.CertPath, certPEM(der), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.ChainPath, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

// certify issues a Fulcio-shaped certificate for pub (see Issue).
func (ca *CA) certify(pub crypto.PublicKey, subject, issuer string, validity time.Duration) ([]byte, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: n,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	if strings.Contains(subject, "@") && !strings.Contains(subject, "://") {
		tmpl.EmailAddresses = []string{subject}
	} else {
		u, err := url.Parse(subject)
		if err != nil {
			return nil, err
		}
		tmpl.URIs = []*url.URL{u}
	}
	if issuer != "" {
		v2, err := asn1.MarshalWithParams(issuer, "utf8")
		if err != nil {
			return nil, err
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: oidIssuerV1, Value: []byte(issuer)}, {Id: oidIssuerV2, Value: v2}}
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
}

// certProvider is the CA in sigstore-go's signing flow (as Fulcio is).
type certProvider struct {
	ca              *CA
	subject, issuer string
}

func (p certProvider) GetCertificate(_ context.Context, kp sign.Keypair, _ *sign.CertificateProviderOptions) ([]byte, error) {
	return p.ca.certify(kp.GetPublicKey(), p.subject, p.issuer, 10*time.Minute)
}

// BundleReferrer signs, with sigstore-go as `cosign sign
// --new-bundle-format` does, an in-toto statement naming subject with
// predicateType (an empty predicate), by an ephemeral key certified by ca
// for (san, issuer), timestamped by tsa when not nil; and pushes the
// Sigstore bundle to r as a referrer of subject. It returns the referrer.
func (ca *CA) BundleReferrer(t testing.TB, r *remote.Repository, subject ocispec.Descriptor, predicateType, san, issuer string, tsa *TSA) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	statement, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"name": "image", "digest": map[string]string{subject.Digest.Algorithm().String(): subject.Digest.Encoded()}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := sign.BundleOptions{CertificateProvider: certProvider{ca, san, issuer}, Context: ctx}
	if tsa != nil {
		opts.TimestampAuthorities = []*sign.TimestampAuthority{sign.NewTimestampAuthority(&sign.TimestampAuthorityOptions{URL: tsa.URL})}
	}
	pb, err := sign.Bundle(&sign.DSSEData{Data: statement, PayloadType: "application/vnd.in-toto+json"}, kp, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	push := func(mt string, data []byte) ocispec.Descriptor {
		d := content.NewDescriptorFromBytes(mt, data)
		if err := r.Push(ctx, d, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	const bundleType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	m, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, ArtifactType: bundleType,
		Config:      push("application/vnd.oci.empty.v1+json", []byte("{}")),
		Layers:      []ocispec.Descriptor{push(bundleType, b)},
		Subject:     &subject,
		Annotations: map[string]string{"dev.sigstore.bundle.predicateType": predicateType},
	})
	if err != nil {
		t.Fatal(err)
	}
	return push(ocispec.MediaTypeImageManifest, m)
}

// TSA is an RFC 3161 timestamp authority served on loopback.
type TSA struct {
	URL  string
	Root *x509.Certificate
	Leaf *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewTSA starts a timestamp authority for the test: a root and a
// timestamping leaf, answering POSTed requests at URL.
func NewTSA(t testing.TB) *TSA {
	t.Helper()
	rootCert, rootKey := selfSigned(t, "imagesigtest TSA root", nil)
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "imagesigtest TSA"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	// Timestamping, critical, as RFC 3161 §2.3 requires.
	eku, err := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 8}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Critical: true, Value: eku}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, rootCert, &k.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	tsa := &TSA{Root: rootCert, Leaf: leaf, key: k}
	srv := httptest.NewServer(http.HandlerFunc(tsa.serve))
	t.Cleanup(srv.Close)
	tsa.URL = srv.URL + "/api/v1/timestamp"
	return tsa
}

func (tsa *TSA) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := timestamp.ParseRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ts := timestamp.Timestamp{
		HashAlgorithm:     req.HashAlgorithm,
		HashedMessage:     req.HashedMessage,
		Time:              time.Now().UTC(),
		Nonce:             req.Nonce,
		Policy:            asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 2},
		Accuracy:          time.Second,
		AddTSACertificate: req.Certificates,
	}
	resp, err := ts.CreateResponseWithOpts(tsa.Leaf, tsa.key, crypto.SHA256)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/timestamp-reply")
	_, _ = w.Write(resp)
}

// Log is a transparency log's signing key, in the role of Rekor: it makes
// signed entry timestamps without a log behind them.
type Log struct {
	key *ecdsa.PrivateKey
	ID  []byte // sha256 of the public key's PKIX form
}

// NewLog makes a log key.
func NewLog(t testing.TB) *Log {
	t.Helper()
	k := newKey(t)
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	id := sha256.Sum256(der)
	return &Log{key: k, ID: id[:]}
}

// HashedRekordBundle returns cosign's dev.sigstore.cosign/bundle
// annotation for a hashedrekord entry of (payload, sig, certPEM),
// integrated at time at, with the log's signed entry timestamp.
func (l *Log) HashedRekordBundle(t testing.TB, payload, sig, certPEM []byte, at time.Time) string {
	t.Helper()
	sum := sha256.Sum256(payload)
	body, err := json.Marshal(map[string]any{
		"apiVersion": "0.0.1", "kind": "hashedrekord",
		"spec": map[string]any{
			"data":      map[string]any{"hash": map[string]any{"algorithm": "sha256", "value": hex.EncodeToString(sum[:])}},
			"signature": map[string]any{"content": base64.StdEncoding.EncodeToString(sig), "publicKey": map[string]any{"content": base64.StdEncoding.EncodeToString(certPEM)}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	payloadJSON := map[string]any{
		"body":           base64.StdEncoding.EncodeToString(body),
		"integratedTime": at.Unix(),
		"logIndex":       int64(1),
		"logID":          hex.EncodeToString(l.ID),
	}
	// The SET signs the canonical JSON (RFC 8785) of the payload: for
	// these keys and values, sorted keys and no spaces.
	canon, err := json.Marshal(payloadJSON) // encoding/json sorts map keys
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(canon)
	set, err := ecdsa.SignASN1(rand.Reader, l.key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"SignedEntryTimestamp": set, "Payload": payloadJSON})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TrustedRoot is a Sigstore trusted_root.json naming cas (certificate
// authorities), tsas and logs, each valid from an hour ago.
func TrustedRoot(t testing.TB, cas []*CA, tsas []*TSA, logs []*Log) []byte {
	t.Helper()
	start := time.Now().Add(-time.Hour)
	var rcas []root.CertificateAuthority
	for _, ca := range cas {
		rcas = append(rcas, &root.FulcioCertificateAuthority{Root: ca.Cert, ValidityPeriodStart: start, URI: "https://fulcio.imagesigtest.invalid"})
	}
	var rtsas []root.TimestampingAuthority
	for _, tsa := range tsas {
		rtsas = append(rtsas, &root.SigstoreTimestampingAuthority{Root: tsa.Root, Leaf: tsa.Leaf, ValidityPeriodStart: start, URI: tsa.URL})
	}
	rlogs := map[string]*root.TransparencyLog{}
	for _, l := range logs {
		rlogs[hex.EncodeToString(l.ID)] = &root.TransparencyLog{
			BaseURL: "https://rekor.imagesigtest.invalid", ID: l.ID, ValidityPeriodStart: start,
			HashFunc: crypto.SHA256, PublicKey: &l.key.PublicKey, SignatureHashFunc: crypto.SHA256,
		}
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, rcas, map[string]*root.TransparencyLog{}, rtsas, rlogs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Ref is host/repo@digest.
func Ref(host, repo string, d digest.Digest) string { return fmt.Sprintf("%s/%s@%s", host, repo, d) }
