package wire

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/ferrypkg/ferry/artifact"
)

// MediaTypeReport is a signed report file's media type.
const MediaTypeReport = "application/vnd.ferry.fleet-report.v1+json"

// SignedReport is a carried member's report as a file: the report's JSON
// as signed (Payload) and the site key's signature over those bytes
// (ECDSA P-256, SHA-256, ASN.1 — as cosign signs a blob).
type SignedReport struct {
	MediaType string `json:"mediaType"`
	Payload   []byte `json:"payload"`
	Signature []byte `json:"signature"`
}

// ErrReportSignature means a report's signature is not the member's.
var ErrReportSignature = errors.New("the report's signature does not verify")

// SignReport writes a report signed by key.
func SignReport(r *Report, key artifact.Signer) ([]byte, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	sig, err := key.SignPayload(payload)
	if err != nil {
		return nil, fmt.Errorf("sign the report: %w", err)
	}
	out, err := json.MarshalIndent(SignedReport{MediaType: MediaTypeReport, Payload: payload, Signature: sig}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// OpenReport reads a signed report file without checking its signature:
// the centre learns from it whose key to check it with (VerifyReport).
func OpenReport(data []byte) (*SignedReport, *Report, error) {
	if len(data) > MaxReportFile {
		return nil, nil, fmt.Errorf("the report is %d bytes, more than %d", len(data), MaxReportFile)
	}
	var sr SignedReport
	if err := json.Unmarshal(data, &sr); err != nil {
		return nil, nil, fmt.Errorf("not a signed fleet report: %w", err)
	}
	if err := onlyFields(data, "mediaType", "payload", "signature"); err != nil {
		return nil, nil, fmt.Errorf("not a signed fleet report: %w", err)
	}
	if sr.MediaType != MediaTypeReport {
		return nil, nil, fmt.Errorf("not a signed fleet report: media type %.64q, not %s", sr.MediaType, MediaTypeReport)
	}
	var r Report // its packages and receipts counted before they are decoded
	if err := json.Unmarshal(sr.Payload, &r); err != nil {
		return nil, nil, fmt.Errorf("the report's payload: %w", err)
	}
	if !ValidMemberName(r.Member) {
		return nil, nil, fmt.Errorf("the report names no valid member (%q)", truncate(r.Member))
	}
	return &sr, &r, nil
}

// VerifyReport checks a report's signature with the member's public key
// (PEM).
func VerifyReport(sr *SignedReport, publicKey string) error {
	k, err := artifact.ParsePublicKey("the member's key", []byte(publicKey))
	if err != nil {
		return err
	}
	if k.VerifyPayload(sr.Payload, sr.Signature) != nil {
		return ErrReportSignature
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// SiteKey is a member's own key: it signs the member's reports. It is an
// ECDSA P-256 key kept unencrypted in a Secret of the member's cluster.
type SiteKey struct {
	priv *ecdsa.PrivateKey
}

var _ artifact.Signer = (*SiteKey)(nil)

// NewSiteKey makes a site key.
func NewSiteKey() (*SiteKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &SiteKey{priv: priv}, nil
}

// ParseSiteKey reads a site key's PEM (PKCS #8).
func ParseSiteKey(data []byte) (*SiteKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("the site key is not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the site key: %w", err)
	}
	priv, ok := k.(*ecdsa.PrivateKey)
	if !ok || priv.Curve != elliptic.P256() {
		return nil, errors.New("the site key is not an ECDSA P-256 key")
	}
	return &SiteKey{priv: priv}, nil
}

// PrivatePEM is the key as kept (PKCS #8 PEM).
func (k *SiteKey) PrivatePEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// PublicPEM is its public half (PKIX PEM, as cosign.pub).
func (k *SiteKey) PublicPEM() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(&k.priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func (k *SiteKey) KeyName() string { return "the site key" }

func (k *SiteKey) PublicKey() crypto.PublicKey { return &k.priv.PublicKey }

func (k *SiteKey) SignPayload(payload []byte) ([]byte, error) {
	sum := sha256.Sum256(payload)
	return ecdsa.SignASN1(rand.Reader, k.priv, sum[:])
}

func (k *SiteKey) VerifyPayload(payload, sig []byte) error {
	sum := sha256.Sum256(payload)
	if !ecdsa.VerifyASN1(&k.priv.PublicKey, sum[:], sig) {
		return ErrReportSignature
	}
	return nil
}
