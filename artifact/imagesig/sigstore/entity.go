package sigstore

import (
	"crypto"
	"crypto/x509"
	"errors"
	"time"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore-go/pkg/verify"
)

// proof selects which proof of signing time a legacy cosign entity shows
// sigstore-go: cosign timestamps different bytes than the log records for
// attestations, so the two are verified separately.
type proof int

const (
	proofNone proof = iota
	proofTlog
	proofTSA
)

// legacyEntity presents a cosign signature or attestation layer as a
// sigstore-go SignedEntity, so that signatures, certificate chains, log
// entries and timestamps are verified by sigstore-go as for bundles.
type legacyEntity struct {
	c     *candidate
	key   bool // verify with a public key (the authority's), not the certificate
	proof proof
}

var _ verify.SignedEntity = legacyEntity{}

func (e legacyEntity) HasInclusionPromise() bool { return e.proof == proofTlog && len(e.c.tlog) > 0 }
func (e legacyEntity) HasInclusionProof() bool   { return false }
func (e legacyEntity) Version() (string, error)  { return "v0.3", nil }

func (e legacyEntity) TlogEntries() ([]*tlog.Entry, error) {
	if e.proof != proofTlog {
		return nil, nil
	}
	return e.c.tlog, nil
}

func (e legacyEntity) Timestamps() ([][]byte, error) {
	if e.proof != proofTSA {
		return nil, nil
	}
	return e.c.timestamps, nil
}

func (e legacyEntity) VerificationContent() (verify.VerificationContent, error) {
	if e.key {
		return keyContent{}, nil
	}
	if e.c.cert == nil {
		return nil, errors.New("no certificate")
	}
	return bundle.NewCertificate(e.c.cert), nil
}

func (e legacyEntity) SignatureContent() (verify.SignatureContent, error) {
	var inner verify.SignatureContent
	if e.c.envelope != nil {
		inner = &bundle.Envelope{Envelope: e.c.envelope}
	} else {
		inner = bundle.NewMessageSignature(nil, "", e.c.sig)
	}
	stamped := e.c.sig
	if e.proof == proofTSA && e.c.envelope != nil {
		// cosign attest (without --new-bundle-format) timestamps the whole
		// envelope, not its signature.
		stamped = e.c.envBytes
	}
	return signatureContent{SignatureContent: inner, stamped: stamped}, nil
}

// signatureContent is the signature sigstore-go checks, with the bytes a
// timestamp or log entry is over.
type signatureContent struct {
	verify.SignatureContent
	stamped []byte
}

func (s signatureContent) Signature() []byte { return s.stamped }

// keyContent is verification content naming the authority's public key;
// the trusted material a key authority builds returns that key whatever
// the hint.
type keyContent struct{}

func (keyContent) CompareKey(key any, tm root.TrustedMaterial) bool {
	v, err := tm.PublicKeyVerifier("")
	if err != nil {
		return false
	}
	pub, err := v.PublicKey()
	if err != nil {
		return false
	}
	eq, ok := key.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(pub)
}

func (keyContent) ValidAtTime(t time.Time, tm root.TrustedMaterial) bool {
	v, err := tm.PublicKeyVerifier("")
	return err == nil && v.ValidAtTime(t)
}

func (keyContent) Certificate() *x509.Certificate        { return nil }
func (k keyContent) PublicKey() verify.PublicKeyProvider { return k }
func (keyContent) Hint() string                          { return "" }
