package imagesig_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/internal/testsupport/imagesigtest"
)

const (
	email  = "dev@example.com"
	issuer = "https://issuer.example"
)

func keylessPolicy(root []byte, ids ...imagesig.Identity) *imagesig.Policy {
	return &imagesig.Policy{Name: "keyless", Required: true, Authorities: []imagesig.Authority{{
		Keyless: &imagesig.KeylessAuthority{Identities: ids, TrustedRoot: root},
	}}}
}

// TestCosignKeyless signs and attests with a local CA's Fulcio-style
// certificate (`cosign sign --key --certificate --certificate-chain`), the
// signing time proven by a local RFC 3161 timestamp authority
// (`--timestamp-server-url`), and checks identities, chains and proofs of
// time offline against a trusted_root.json.
func TestCosignKeyless(t *testing.T) {
	ctx := context.Background()
	cosign := imagesigtest.NewCosign(t)
	host := imagesigtest.Registry(t)
	dir := t.TempDir()
	ca := imagesigtest.NewCA(t, "imagesigtest fulcio")
	tsa := imagesigtest.NewTSA(t)
	leaf := ca.Issue(t, dir, "leaf", email, issuer, 10*time.Minute)
	predicate := writeFile(t, dir, "p.json", `{"builder":{"id":"https://ci.example/builder"},"buildType":"https://example/build"}`)
	repo := imagesigtest.Repository(t, host, "app")
	certFlags := []string{"--key", leaf.KeyPath, "--certificate", leaf.CertPath, "--certificate-chain", leaf.ChainPath, "--tlog-upload=false", "--allow-http-registry"}

	img := imagesigtest.PushImage(t, host, "app", "v1", []byte("one"))
	ref := imagesigtest.Ref(host, "app", img.Digest)
	cosign.Must(append(append([]string{"sign"}, certFlags...), "--timestamp-server-url", tsa.URL, ref)...)
	cosign.Must(append(append([]string{"attest"}, certFlags...), "--timestamp-server-url", tsa.URL, "--predicate", predicate, "--type", "slsaprovenance", ref)...)
	evidence := imagesigtest.Evidence(t, repo, img)
	root := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, []*imagesigtest.TSA{tsa}, nil)

	exact := keylessPolicy(root, imagesig.Identity{Issuer: issuer, Subject: email})
	exact.Attestations = []imagesig.Attestation{{PredicateType: slsa02}}
	res, err := exact.Verify(ctx, repo, img.Digest, evidence)
	if err != nil {
		t.Fatalf("the right identity: %v", err)
	}
	if !slices.Equal(res.Signers, []string{email + " (" + issuer + ")"}) || !slices.Contains(res.Attestations, slsa02) {
		t.Fatalf("result: %+v", res)
	}
	byRegexp := keylessPolicy(root, imagesig.Identity{IssuerRegExp: `https://issuer\.(example|test)`, SubjectRegExp: `.*@example\.com`})
	if _, err := byRegexp.Verify(ctx, repo, img.Digest, evidence); err != nil {
		t.Fatalf("identity by regexp: %v", err)
	}

	other := imagesigtest.NewCA(t, "another CA")
	tsaOnly := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, nil, nil)
	for _, tc := range []struct {
		name   string
		policy *imagesig.Policy
		reason string
	}{
		{"wrong subject", keylessPolicy(root, imagesig.Identity{Issuer: issuer, Subject: "ops@example.com"}),
			"certificate identity dev@example.com (issuer https://issuer.example) not allowed"},
		{"wrong issuer", keylessPolicy(root, imagesig.Identity{Issuer: "https://accounts.example", Subject: email}),
			"certificate identity dev@example.com (issuer https://issuer.example) not allowed"},
		{"regexp is anchored", keylessPolicy(root, imagesig.Identity{Issuer: issuer, SubjectRegExp: `dev@example`}), "not allowed"},
		{"another CA", keylessPolicy(imagesigtest.TrustedRoot(t, []*imagesigtest.CA{other}, []*imagesigtest.TSA{tsa}, nil),
			imagesig.Identity{Issuer: issuer, Subject: email}), "certificate does not chain to the trusted root"},
		{"TSA not trusted", keylessPolicy(tsaOnly, imagesig.Identity{Issuer: issuer, Subject: email}), "no proof of signing time"},
		{"another TSA", keylessPolicy(imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, []*imagesigtest.TSA{imagesigtest.NewTSA(t)}, nil),
			imagesig.Identity{Issuer: issuer, Subject: email}), "no proof of signing time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.policy.Verify(ctx, repo, img.Digest, evidence)
			wantErr(t, tc.name, err, imagesig.ErrUnverified, tc.reason)
		})
	}

	// A keyless signature without any proof of time.
	img2 := imagesigtest.PushImage(t, host, "app", "v2", []byte("two"))
	cosign.Must(append(append([]string{"sign"}, certFlags...), imagesigtest.Ref(host, "app", img2.Digest))...)
	_, err = exact.Verify(ctx, repo, img2.Digest, imagesigtest.Evidence(t, repo, img2))
	wantErr(t, "no timestamp", err, imagesig.ErrUnverified, "no proof of signing time")

	// A certificate that expired before the timestamp.
	expired := ca.Issue(t, dir, "expired", email, issuer, -30*time.Second)
	img3 := imagesigtest.PushImage(t, host, "app", "v3", []byte("three"))
	cosign.Must("sign", "--key", expired.KeyPath, "--certificate", expired.CertPath, "--certificate-chain", expired.ChainPath,
		"--tlog-upload=false", "--allow-http-registry", "--timestamp-server-url", tsa.URL, imagesigtest.Ref(host, "app", img3.Digest))
	_, err = exact.Verify(ctx, repo, img3.Digest, imagesigtest.Evidence(t, repo, img3))
	wantErr(t, "expired certificate", err, imagesig.ErrUnverified, "signed outside the certificate's validity")

	// A key authority does not accept a certificate it does not hold.
	_, _, stranger := imagesigtest.KeyPair(t, dir, "stranger")
	_, err = keyPolicy(true, stranger).Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "key policy, keyless signature", err, imagesig.ErrUnverified, "unknown key")
}

// TestCosignKeylessTlog proves the signing time by a transparency log's
// signed entry timestamp (the Rekor bundle cosign stores), made by a local
// log key and attached with `cosign attach signature --rekor-response`.
func TestCosignKeylessTlog(t *testing.T) {
	ctx := context.Background()
	cosign := imagesigtest.NewCosign(t)
	host := imagesigtest.Registry(t)
	dir := t.TempDir()
	ca := imagesigtest.NewCA(t, "imagesigtest fulcio")
	const workflow = "https://github.com/example/app/.github/workflows/release.yml@refs/heads/main"
	const actions = "https://token.actions.githubusercontent.com"
	leaf := ca.Issue(t, dir, "leaf", workflow, actions, 10*time.Minute)
	repo := imagesigtest.Repository(t, host, "app")
	log := imagesigtest.NewLog(t)

	img := imagesigtest.PushImage(t, host, "app", "v1", []byte("one"))
	ref := imagesigtest.Ref(host, "app", img.Digest)
	payload := cosign.Must("generate", "--allow-http-registry", ref)
	payloadPath := writeFile(t, dir, "payload.json", payload)
	sigPath := filepath.Join(dir, "payload.sig")
	cosign.Must("sign-blob", "--key", leaf.KeyPath, "--tlog-upload=false", "--output-signature", sigPath, payloadPath)
	sigB64, err := os.ReadFile(sigPath)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sigB64)))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(leaf.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	rekor := log.HashedRekordBundle(t, []byte(payload), sig, certPEM, time.Now())
	resp, _ := json.Marshal(map[string]json.RawMessage{"rekorBundle": json.RawMessage(rekor)})
	cosign.Must("attach", "signature", "--allow-http-registry", "--payload", payloadPath, "--signature", sigPath,
		"--certificate", leaf.CertPath, "--certificate-chain", leaf.ChainPath, "--rekor-response", writeFile(t, dir, "rekor.json", string(resp)), ref)
	evidence := imagesigtest.Evidence(t, repo, img)

	id := imagesig.Identity{Issuer: actions, SubjectRegExp: `https://github\.com/example/app/\.github/workflows/.*`}
	withLog := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, nil, []*imagesigtest.Log{log})
	res, err := keylessPolicy(withLog, id).Verify(ctx, repo, img.Digest, evidence)
	if err != nil {
		t.Fatalf("signed entry timestamp of a trusted log: %v", err)
	}
	if !slices.Equal(res.Signers, []string{workflow + " (" + actions + ")"}) {
		t.Fatalf("result: %+v", res)
	}
	// Not a log the root trusts, or no log at all.
	otherLog := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, nil, []*imagesigtest.Log{imagesigtest.NewLog(t)})
	_, err = keylessPolicy(otherLog, id).Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "another log", err, imagesig.ErrUnverified, "transparency log entry not verified")
	// A log entry integrated after the certificate expired.
	img2 := imagesigtest.PushImage(t, host, "app", "v2", []byte("two"))
	ref2 := imagesigtest.Ref(host, "app", img2.Digest)
	payload2 := cosign.Must("generate", "--allow-http-registry", ref2)
	payload2Path := writeFile(t, dir, "payload2.json", payload2)
	sig2Path := filepath.Join(dir, "payload2.sig")
	cosign.Must("sign-blob", "--key", leaf.KeyPath, "--tlog-upload=false", "--output-signature", sig2Path, payload2Path)
	sig2B64, err := os.ReadFile(sig2Path)
	if err != nil {
		t.Fatal(err)
	}
	sig2, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig2B64)))
	if err != nil {
		t.Fatal(err)
	}
	late, _ := json.Marshal(map[string]json.RawMessage{"rekorBundle": json.RawMessage(log.HashedRekordBundle(t, []byte(payload2), sig2, certPEM, time.Now().Add(time.Hour)))})
	cosign.Must("attach", "signature", "--allow-http-registry", "--payload", payload2Path, "--signature", sig2Path,
		"--certificate", leaf.CertPath, "--certificate-chain", leaf.ChainPath, "--rekor-response", writeFile(t, dir, "late.json", string(late)), ref2)
	_, err = keylessPolicy(withLog, id).Verify(ctx, repo, img2.Digest, imagesigtest.Evidence(t, repo, img2))
	wantErr(t, "entry after expiry", err, imagesig.ErrUnverified, "signed outside the certificate's validity")

	noLog := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, nil, nil)
	_, err = keylessPolicy(noLog, id).Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "no log", err, imagesig.ErrUnverified, "no proof of signing time")
}

// TestSigstoreBundleKeyless verifies Sigstore bundles (the format of
// `cosign sign --new-bundle-format`, made here by sigstore-go's signer
// with the local CA in Fulcio's place and the local TSA), pushed as OCI
// 1.1 referrers: a signature and an attestation.
func TestSigstoreBundleKeyless(t *testing.T) {
	ctx := context.Background()
	host := imagesigtest.Registry(t)
	repo := imagesigtest.Repository(t, host, "app")
	ca := imagesigtest.NewCA(t, "imagesigtest fulcio")
	tsa := imagesigtest.NewTSA(t)
	root := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, []*imagesigtest.TSA{tsa}, nil)

	img := imagesigtest.PushImage(t, host, "app", "v1", []byte("one"))
	ca.BundleReferrer(t, repo, img, imagesig.PredicateTypeCosignSign, email, issuer, tsa)
	ca.BundleReferrer(t, repo, img, slsa1, email, issuer, tsa)
	evidence := imagesigtest.Evidence(t, repo, img)
	p := keylessPolicy(root, imagesig.Identity{Issuer: issuer, Subject: email})
	p.Attestations = []imagesig.Attestation{{PredicateType: slsa1}}
	res, err := p.Verify(ctx, repo, img.Digest, evidence)
	if err != nil {
		t.Fatalf("%d bundles: %v", len(evidence), err)
	}
	if !slices.Equal(res.Signers, []string{email + " (" + issuer + ")"}) || !slices.Equal(res.Attestations, []string{slsa1}) {
		t.Fatalf("result: %+v", res)
	}

	_, err = keylessPolicy(root, imagesig.Identity{Issuer: issuer, Subject: "ops@example.com"}).Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "wrong subject", err, imagesig.ErrUnverified, "signature bundle: certificate identity dev@example.com (issuer https://issuer.example) not allowed")
	noTSA := imagesigtest.TrustedRoot(t, []*imagesigtest.CA{ca}, nil, nil)
	_, err = keylessPolicy(noTSA, imagesig.Identity{Issuer: issuer, Subject: email}).Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "TSA not trusted", err, imagesig.ErrUnverified, "no proof of signing time")
	_, _, pub := imagesigtest.KeyPair(t, t.TempDir(), "k")
	_, err = keyPolicy(true, pub).Verify(ctx, repo, img.Digest, evidence)
	wantErr(t, "key policy", err, imagesig.ErrUnverified, "signed by a certificate, not by a key")

	// No timestamp at all.
	img2 := imagesigtest.PushImage(t, host, "app", "v2", []byte("two"))
	ca.BundleReferrer(t, repo, img2, imagesig.PredicateTypeCosignSign, email, issuer, nil)
	_, err = keylessPolicy(root, imagesig.Identity{Issuer: issuer, Subject: email}).Verify(ctx, repo, img2.Digest, imagesigtest.Evidence(t, repo, img2))
	wantErr(t, "no timestamp", err, imagesig.ErrUnverified, "no proof of signing time")
}
