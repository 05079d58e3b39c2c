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
	"fmt"
	"regexp"
	"regexp/syntax"
	"sync/atomic"

	"github.com/sigstore/sigstore/pkg/cryptoutils"

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

// Bounds of what Verify reads: evidence beyond them is not considered.
const (
	// MaxManifestSize bounds an evidence manifest.
	MaxManifestSize = 4 << 20
	// MaxLayerSize bounds one layer of an evidence manifest (a signed
	// payload, a DSSE envelope or a Sigstore bundle).
	MaxLayerSize = 16 << 20
	// MaxEvidence is how many evidence manifests are considered.
	MaxEvidence = 64
	// MaxLayers is how many layers of one manifest are considered.
	MaxLayers = 64
	// MaxEvidenceBytes bounds the bytes Verify reads in all (manifests
	// and layers); evidence past it is not considered. Memory holds one
	// manifest and one layer at a time.
	MaxEvidenceBytes = 256 << 20
)

// Media types and annotations of cosign and Sigstore evidence.
const (
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	MediaTypeDSSE          = "application/vnd.dsse.envelope.v1+json"
	MediaTypeBundle        = "application/vnd.dev.sigstore.bundle.v0.3+json"
	ArtifactTypeSignature  = "application/vnd.dev.cosign.artifact.sig.v1+json"

	AnnotationSignature   = "dev.cosignproject.cosign/signature"
	AnnotationCertificate = "dev.sigstore.cosign/certificate"
	AnnotationChain       = "dev.sigstore.cosign/chain"
	AnnotationBundle      = "dev.sigstore.cosign/bundle"
	AnnotationTimestamp   = "dev.sigstore.cosign/rfc3161timestamp"

	// PredicateTypeCosignSign is the predicate of the statement cosign signs
	// for `cosign sign --new-bundle-format`: a signature, not an attestation.
	PredicateTypeCosignSign = "https://sigstore.dev/cosign/sign/v1"
)

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
	e := engine.Load()
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnverified, errNoEngine)
	}
	return (*e).Verify(ctx, p, fetch, subject, evidence)
}

// Engine verifies evidence against policies. This package holds the
// policy language only, light enough for every binary that reads a
// package's configuration; the engine, which links sigstore-go and
// Rekor's types, is package
// github.com/ferrypkg/ferry/artifact/imagesig/sigstore, registered by
// importing it (a blank import in the main package of each program that
// verifies, and in tests). Without it, Verify fails closed.
type Engine interface {
	// Validate reports a policy the engine cannot check.
	Validate(p *Policy) error
	// Verify is Policy.Verify.
	Verify(ctx context.Context, p *Policy, fetch content.Fetcher, subject digest.Digest, evidence []ocispec.Descriptor) (*Result, error)
}

var engine atomic.Pointer[Engine]

const errNoEngine = "no signature verifier linked into this program (import github.com/ferrypkg/ferry/artifact/imagesig/sigstore)"

// Register makes e the engine of Verify and Validate; the last
// registration wins.
func Register(e Engine) { engine.Store(&e) }

// Validate reports a policy that cannot be checked: no authority, an
// authority with both or neither of key and keyless, a key that does not
// parse, keyless without identities or a trusted root, an identity without
// an issuer or a subject, a regular expression that does not compile, an
// attestation without a predicate type. With the engine linked, it also
// parses the trusted roots.
func (p *Policy) Validate() error {
	if err := p.Check(); err != nil {
		return err
	}
	if e := engine.Load(); e != nil {
		return (*e).Validate(p)
	}
	return nil
}

// Check is Validate without the engine: the policy's shape, which the
// engine checks first when it compiles a policy.
func (p *Policy) Check() error {
	if len(p.Authorities) == 0 {
		return fmt.Errorf("policy %.64q: no authorities", p.Name)
	}
	for i, a := range p.Authorities {
		label := a.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i+1)
		}
		switch {
		case a.Key != nil && a.Keyless != nil:
			return fmt.Errorf("policy %.64q: authority %.64s: both key and keyless", p.Name, label)
		case a.Key != nil:
			if _, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(a.Key.PEM)); err != nil {
				return fmt.Errorf("policy %.64q: authority %.64s: public key: %v", p.Name, label, err)
			}
		case a.Keyless != nil:
			if len(a.Keyless.TrustedRoot) == 0 || !json.Valid(a.Keyless.TrustedRoot) {
				return fmt.Errorf("policy %.64q: authority %.64s: keyless without a trusted root", p.Name, label)
			}
			if len(a.Keyless.Identities) == 0 {
				return fmt.Errorf("policy %.64q: authority %.64s: keyless without identities", p.Name, label)
			}
			for _, id := range a.Keyless.Identities {
				if err := id.validate(); err != nil {
					return fmt.Errorf("policy %.64q: authority %.64s: %v", p.Name, label, err)
				}
			}
		default:
			return fmt.Errorf("policy %.64q: authority %.64s: neither key nor keyless", p.Name, label)
		}
	}
	for _, at := range p.Attestations {
		if at.PredicateType == "" {
			return fmt.Errorf("policy %.64q: attestation %.64q without a predicate type", p.Name, at.Name)
		}
	}
	return nil
}

func (id Identity) validate() error {
	if id.Issuer == "" && id.IssuerRegExp == "" {
		return errors.New("identity without an issuer")
	}
	if id.Subject == "" && id.SubjectRegExp == "" {
		return errors.New("identity without a subject")
	}
	for _, re := range []string{id.IssuerRegExp, id.SubjectRegExp} {
		if _, err := regexp.Compile(re); err != nil {
			// regexp's error quotes the whole expression: name it in short.
			var se *syntax.Error
			if errors.As(err, &se) {
				return fmt.Errorf("identity regexp: %s: %.64q", se.Code, se.Expr)
			}
			return fmt.Errorf("identity regexp: %v", err)
		}
	}
	return nil
}
