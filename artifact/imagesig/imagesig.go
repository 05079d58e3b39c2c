// Package imagesig checks, offline, the signatures and attestations that
// image publishers make with cosign, against a Policy modeled on the
// Sigstore policy-controller's ClusterImagePolicy authorities (and
// Kyverno's verifyImages attestors): public keys, or keyless certificate
// identities with a Sigstore trusted root.
//
// Nothing here touches the network: the evidence (signature and
// attestation manifests and their layers) is read from a content.Fetcher,
// which for ferry is a package, a registry the package was deployed to, or
// the source registry at create.
package imagesig

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// Errors of Verify; match them with errors.Is.
var (
	// ErrNoSignature means no evidence names the subject although the
	// policy requires a signature.
	ErrNoSignature = errors.New("no signature")
	// ErrUnverified means evidence names the subject but none satisfies
	// the policy (unknown key, wrong identity, bad certificate chain, no
	// proof of time, tampered payload, missing attestation).
	ErrUnverified = errors.New("signature not verified")
)

// Policy is what an image's signatures must satisfy. It is carried in
// ferry.json (Config.ImagePolicies) exactly as below, so that the package's
// own signature covers it and the cluster enforces what create checked.
type Policy struct {
	// Name identifies the policy in a package; images name it.
	Name string `json:"name"`
	// Required says an image without a valid signature is refused; when
	// false, only signatures that are there are checked (none is fine, a
	// bad one is not). Definitions default it to true.
	Required bool `json:"required"`
	// Authorities: a signature satisfies the policy when it verifies
	// against any one of them.
	Authorities []Authority `json:"authorities"`
	// Attestations must each be present for the subject, in-toto
	// statements of that predicate type signed by one of Authorities.
	Attestations []Attestation `json:"attestations,omitempty"`
}

// Authority is one trusted signer: exactly one of Key and Keyless is set.
type Authority struct {
	Name    string            `json:"name,omitempty"`
	Key     *KeyAuthority     `json:"key,omitempty"`
	Keyless *KeylessAuthority `json:"keyless,omitempty"`
}

// KeyAuthority is a public key, PEM (ECDSA, RSA or Ed25519, as cosign
// makes and reads them).
type KeyAuthority struct {
	PEM string `json:"pem"`
}

// KeylessAuthority trusts signatures by short-lived certificates whose
// identity matches one of Identities, chaining to a certificate authority
// of TrustedRoot, and whose signing time is proven by a transparency-log
// entry or a signed timestamp TrustedRoot also trusts.
type KeylessAuthority struct {
	Identities []Identity `json:"identities"`
	// TrustedRoot is a Sigstore trusted root (the trusted_root.json
	// format of sigstore/protobuf-specs: certificate authorities,
	// transparency logs, timestamp authorities).
	TrustedRoot json.RawMessage `json:"trustedRoot"`
}

// Identity matches a certificate's OIDC issuer and subject (its SAN): each
// exactly, or by a regular expression (RE2, anchored: it must match the
// whole value). An identity names both an issuer and a subject.
type Identity struct {
	Issuer        string `json:"issuer,omitempty"`
	IssuerRegExp  string `json:"issuerRegExp,omitempty"`
	Subject       string `json:"subject,omitempty"`
	SubjectRegExp string `json:"subjectRegExp,omitempty"`
}

// Attestation names a predicate type (e.g. https://slsa.dev/provenance/v1,
// https://spdx.dev/Document) whose signed attestation must be present.
type Attestation struct {
	Name          string `json:"name,omitempty"`
	PredicateType string `json:"predicateType"`
}

// Kinds of evidence.
const (
	KindSignature   = "signature"   // cosign signature manifest (.sig tag or referrer)
	KindAttestation = "attestation" // cosign attestation manifest (.att tag or referrer), DSSE in-toto
	KindBundle      = "bundle"      // Sigstore bundle referrer (cosign --new-bundle-format)
)

// Result says how a subject satisfied a policy.
type Result struct {
	Subject digest.Digest `json:"subject"`
	// Signers are the authorities (name, or key fingerprint / certificate
	// identity) whose signatures over Subject verified.
	Signers []string `json:"signers,omitempty"`
	// Attestations are the predicate types verified.
	Attestations []string `json:"attestations,omitempty"`
}

// Verify checks that evidence holds a signature over subject (and the
// attestations p names) satisfying p. evidence are the descriptors of
// candidate signature, attestation and bundle manifests (those naming
// other subjects are ignored); fetch reads them and their layers, each
// read bounded. A subject that evidence does not sign is ErrNoSignature
// when p.Required, else a Result with no signers; a signature that fails
// is ErrUnverified with a one-line reason.
//
// Evidence is understood in three forms: cosign signature manifests
// (simple-signing layers, the sha256-<hex>.sig tag or an OCI 1.1
// referrer), cosign attestation manifests (DSSE in-toto layers, .att or a
// referrer) and Sigstore bundles (cosign --new-bundle-format). A manifest
// with a subject names it; one without (the tag scheme) names the images
// its payloads name. Any one verified signature satisfies p; when none
// verifies, the first failure is the reason (signatures by other signers
// next to a valid one do not fail it). Evidence offered that cannot be
// read (missing, larger than its bound, not as its descriptor says) fails
// closed. Keys verify without a proof of time; certificates need one the
// trusted root verifies: a Rekor signed entry timestamp or an RFC 3161
// timestamp, within the certificate's validity. Nothing is fetched but
// through fetch: no network, no TUF. At most MaxEvidence manifests of
// MaxManifestSize, MaxLayers layers each of MaxLayerSize and
// MaxEvidenceBytes in all are read, one layer held at a time.
func (p *Policy) Verify(ctx context.Context, fetch content.Fetcher, subject digest.Digest, evidence []ocispec.Descriptor) (*Result, error) {
	return p.verify(ctx, fetch, subject, evidence)
}
