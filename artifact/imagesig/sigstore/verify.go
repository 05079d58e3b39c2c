package sigstore

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/options"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact/imagesig"
)

func init() { imagesig.Register(engine{}) }

// engine is imagesig's Engine: cosign and Sigstore evidence verified with
// sigstore-go.
type engine struct{}

// Validate compiles p: keys parsed, trusted roots parsed, regular
// expressions compiled.
func (engine) Validate(p *imagesig.Policy) error {
	_, err := compile(p)
	return err
}

// Verify is imagesig.Policy.Verify.
func (engine) Verify(ctx context.Context, p *imagesig.Policy, fetch content.Fetcher, subject digest.Digest, evidence []ocispec.Descriptor) (*imagesig.Result, error) {
	return verifyPolicy(ctx, p, fetch, subject, evidence)
}

// compiled is a policy ready to verify with.
type compiled struct {
	authorities []authority
}

type authority struct {
	name string
	// key authorities: the verifiers cosign may have signed with (its
	// default for the key, and SHA-256 / pure Ed25519 as older cosign)
	key []signature.Verifier
	// keyless authorities
	root       *root.TrustedRoot
	identities []matcher
}

type matcher struct {
	imagesig.Identity
	issuer, subject *regexp.Regexp
	id              verify.CertificateIdentity
}

func compile(p *imagesig.Policy) (*compiled, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	c := &compiled{}
	for i, a := range p.Authorities {
		label := a.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i+1)
		}
		switch {
		case a.Key != nil:
			pub, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(a.Key.PEM))
			if err != nil {
				return nil, fmt.Errorf("policy %.64q: authority %.64s: public key: %v", p.Name, label, err)
			}
			vs, err := keyVerifiers(pub)
			if err != nil {
				return nil, fmt.Errorf("policy %.64q: authority %.64s: public key: %v", p.Name, label, err)
			}
			name := a.Name
			if name == "" {
				name = "key " + imagesig.KeyFingerprint(a.Key.PEM)[:len("sha256:")+16]
			}
			c.authorities = append(c.authorities, authority{name: name, key: vs})
		default: // keyless, as Check made sure
			tr, err := root.NewTrustedRootFromJSON(a.Keyless.TrustedRoot)
			if err != nil {
				return nil, fmt.Errorf("policy %.64q: authority %.64s: trusted root: %v", p.Name, label, err)
			}
			au := authority{name: a.Name, root: tr}
			for _, id := range a.Keyless.Identities {
				m, err := newMatcher(id)
				if err != nil {
					return nil, fmt.Errorf("policy %.64q: authority %.64s: %v", p.Name, label, err)
				}
				au.identities = append(au.identities, m)
			}
			c.authorities = append(c.authorities, au)
		}
	}
	return c, nil
}

// keyVerifiers are the ways cosign signs with a key of pub's type: its
// default (ECDSA with the curve's hash, RSA PKCS #1 v1.5, Ed25519ph) and,
// where that differs, the SHA-256 / pure Ed25519 of older versions.
func keyVerifiers(pub crypto.PublicKey) ([]signature.Verifier, error) {
	def, err := signature.LoadDefaultVerifier(pub, options.WithED25519ph())
	if err != nil {
		return nil, err
	}
	vs := []signature.Verifier{def}
	switch k := pub.(type) {
	case ed25519.PublicKey:
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return vs, nil
		}
	default:
		return vs, nil
	}
	old, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return append(vs, old), nil
}

func anchored(re string) (*regexp.Regexp, error) {
	if re == "" {
		return nil, nil
	}
	return regexp.Compile("^(?:" + re + ")$")
}

func newMatcher(id imagesig.Identity) (matcher, error) {
	if id.Issuer == "" && id.IssuerRegExp == "" {
		return matcher{}, errors.New("identity without an issuer")
	}
	if id.Subject == "" && id.SubjectRegExp == "" {
		return matcher{}, errors.New("identity without a subject")
	}
	m := matcher{Identity: id}
	var err error
	if m.issuer, err = anchored(id.IssuerRegExp); err != nil {
		return matcher{}, fmt.Errorf("issuer regexp: %v", err)
	}
	if m.subject, err = anchored(id.SubjectRegExp); err != nil {
		return matcher{}, fmt.Errorf("subject regexp: %v", err)
	}
	issuerRE, subjectRE := "", ""
	if m.issuer != nil {
		issuerRE = m.issuer.String()
	}
	if m.subject != nil {
		subjectRE = m.subject.String()
	}
	if m.id, err = verify.NewShortCertificateIdentity(id.Issuer, issuerRE, id.Subject, subjectRE); err != nil {
		return matcher{}, err
	}
	return m, nil
}

func (m matcher) matches(san, issuer string) bool {
	if m.Issuer != "" && issuer != m.Issuer {
		return false
	}
	if m.issuer != nil && !m.issuer.MatchString(issuer) {
		return false
	}
	if m.Subject != "" && san != m.Subject {
		return false
	}
	if m.subject != nil && !m.subject.MatchString(san) {
		return false
	}
	return true
}

// verifyPolicy is imagesig.Policy.Verify.
func verifyPolicy(ctx context.Context, p *imagesig.Policy, fetch content.Fetcher, subject digest.Digest, evidence []ocispec.Descriptor) (*imagesig.Result, error) {
	if err := subject.Validate(); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	pc, err := compile(p)
	if err != nil {
		return nil, err
	}
	res := &imagesig.Result{Subject: subject}
	var sigReasons []string
	attReasons := map[string][]string{}
	sawSignature := false
	g, err := gather(ctx, fetch, subject, evidence, func(c *candidate) {
		signer, reason := pc.check(c, subject)
		switch {
		case c.isSignature():
			sawSignature = true
			if reason != "" {
				sigReasons = append(sigReasons, reason)
			} else if !slices.Contains(res.Signers, signer) {
				res.Signers = append(res.Signers, signer)
			}
		case reason != "":
			attReasons[c.predicateType] = append(attReasons[c.predicateType], reason)
		case !slices.Contains(res.Attestations, c.predicateType):
			res.Attestations = append(res.Attestations, c.predicateType)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(res.Signers) == 0 {
		switch {
		case sawSignature:
			return nil, fmt.Errorf("%w: %s", imagesig.ErrUnverified, sigReasons[0])
		case len(g.problems) > 0:
			return nil, fmt.Errorf("%w: %s", imagesig.ErrUnverified, g.problems[0])
		case p.Required:
			return nil, fmt.Errorf("%w for %s", imagesig.ErrNoSignature, subject)
		case !g.named:
			return res, nil // nothing signs the subject, and nothing has to
		}
		// Only attestations name the subject: they are checked below.
	}
	for _, at := range p.Attestations {
		if slices.Contains(res.Attestations, at.PredicateType) {
			continue
		}
		if r := attReasons[at.PredicateType]; len(r) > 0 {
			return nil, fmt.Errorf("%w: attestation %s: %s", imagesig.ErrUnverified, at.PredicateType, r[0])
		}
		return nil, fmt.Errorf("%w: attestation %s missing", imagesig.ErrUnverified, at.PredicateType)
	}
	return res, nil
}

// check verifies one candidate against each authority; it returns the
// first that verifies, or the reason the most telling authority refused.
func (pc *compiled) check(c *candidate, subject digest.Digest) (signer, reason string) {
	for _, a := range pc.authorities {
		s, r := a.check(c, subject)
		if r == "" {
			return s, ""
		}
		if reason == "" || (a.key == nil && c.certificate() != nil) {
			reason = r
		}
	}
	return "", oneLine(describe(c) + reason)
}

func describe(c *candidate) string {
	switch {
	case c.kind == imagesig.KindBundle && c.isSignature():
		return "signature bundle: "
	case c.kind == imagesig.KindBundle:
		return "attestation bundle " + c.predicateType + ": "
	case c.kind == imagesig.KindAttestation:
		return "attestation " + c.predicateType + ": "
	}
	return ""
}

// certificate is the signing certificate of c, nil when a key signed it.
func (c *candidate) certificate() *x509.Certificate {
	if c.bundle == nil {
		return c.cert
	}
	vc, err := c.bundle.VerificationContent()
	if err != nil {
		return nil
	}
	return vc.Certificate()
}

func (a *authority) check(c *candidate, subject digest.Digest) (signer, reason string) {
	defer func() {
		if r := recover(); r != nil {
			signer, reason = "", "malformed evidence"
		}
	}()
	artifact := func() verify.ArtifactPolicyOption {
		if c.payload != nil {
			return verify.WithArtifact(bytes.NewReader(c.payload))
		}
		raw, _ := hex.DecodeString(subject.Encoded())
		return verify.WithArtifactDigest(subject.Algorithm().String(), raw)
	}
	if a.key != nil {
		var entity verify.SignedEntity = legacyEntity{c: c, key: true}
		if c.bundle != nil {
			if c.certificate() != nil {
				return "", "signed by a certificate, not by a key"
			}
			entity = c.bundle
		}
		for _, kv := range a.key {
			tm := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
				return root.NewExpiringKey(kv, timeZero, timeZero), nil
			})
			v, err := verify.NewVerifier(tm, verify.WithNoObserverTimestamps())
			if err != nil {
				return "", err.Error()
			}
			if _, err := v.Verify(entity, verify.NewPolicy(artifact(), verify.WithKey())); err == nil {
				return a.name, ""
			}
		}
		return "", "signature by an unknown key"
	}

	cert := c.certificate()
	if cert == nil {
		return "", "signed by a key, not by a certificate"
	}
	sum, err := certificate.SummarizeCertificate(cert)
	if err != nil {
		return "", fmt.Sprintf("certificate: %v", err)
	}
	var ids []verify.PolicyOption
	matched := false
	for _, m := range a.identities {
		ids = append(ids, verify.WithCertificateIdentity(m.id))
		matched = matched || m.matches(sum.SubjectAlternativeName, sum.Extensions.Issuer)
	}
	if !matched {
		return "", fmt.Sprintf("certificate identity %s (issuer %s) not allowed", sum.SubjectAlternativeName, orNone(sum.Extensions.Issuer))
	}
	name := a.name
	if name == "" {
		name = sum.SubjectAlternativeName + " (" + sum.Extensions.Issuer + ")"
	}
	// Chain first, at the certificate's own start of validity: a chain
	// that cannot hold at any time is said so, rather than as a time
	// problem.
	if _, err := verify.VerifyLeafCertificate(cert.NotBefore, stripSAN(cert), a.root); err != nil {
		return "", "certificate does not chain to the trusted root"
	}
	// Each proof of time is tried on its own: a log entry the root can
	// check, else a signed timestamp it can.
	type attempt struct {
		entity verify.SignedEntity
		tlog   bool
	}
	var attempts []attempt
	hasLogs, hasTSAs := len(a.root.RekorLogs()) > 0, len(a.root.TimestampingAuthorities()) > 0
	if b := c.bundle; b != nil {
		entries, _ := b.TlogEntries()
		stamps, _ := b.Timestamps()
		if len(entries) > 0 && hasLogs {
			attempts = append(attempts, attempt{b, true})
		}
		if len(stamps) > 0 && hasTSAs {
			attempts = append(attempts, attempt{b, false})
		}
	} else {
		if len(c.tlog) > 0 && hasLogs {
			attempts = append(attempts, attempt{legacyEntity{c: c, proof: proofTlog}, true})
		}
		if len(c.timestamps) > 0 && hasTSAs {
			attempts = append(attempts, attempt{legacyEntity{c: c, proof: proofTSA}, false})
		}
	}
	if len(attempts) == 0 {
		return "", "no proof of signing time (no transparency log entry or signed timestamp the trusted root verifies)"
	}
	var first error
	for _, at := range attempts {
		opts := []verify.VerifierOption{verify.WithObserverTimestamps(1)}
		if at.tlog {
			opts = append(opts, verify.WithTransparencyLog(1))
		}
		v, err := verify.NewVerifier(a.root, opts...)
		if err == nil {
			_, err = v.Verify(at.entity, verify.NewPolicy(artifact(), ids...))
		}
		if err == nil {
			return name, ""
		}
		if first == nil {
			first = err
		}
	}
	return "", explain(first)
}

// explain turns a sigstore-go verification error into a short reason.
func explain(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "expired or is not yet valid"), strings.Contains(s, "outside certificate validity"):
		return "signed outside the certificate's validity"
	case strings.Contains(s, "log inclusion"), strings.Contains(s, "transparency log"):
		return "transparency log entry not verified by the trusted root"
	case strings.Contains(s, "timestamp"):
		return "no proof of signing time within the certificate's validity"
	case strings.Contains(s, "leaf certificate"):
		// check verified the chain at the certificate's start: what
		// fails at the signing time is the validity of it or its CA.
		return "signed outside the certificate's validity"
	case strings.Contains(s, "certificate identity"):
		return "certificate identity not allowed"
	case strings.Contains(s, "signature"), strings.Contains(s, "artifact"):
		return "signature does not match the signed payload"
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// stripSAN drops the critical SAN extension Go cannot handle (Fulcio's
// OtherName SAN) from a copy of cert, as sigstore-go does before it
// verifies a chain.
func stripSAN(cert *x509.Certificate) *x509.Certificate {
	if len(cert.UnhandledCriticalExtensions) == 0 {
		return cert
	}
	cp := *cert
	cp.UnhandledCriticalExtensions = nil
	for _, oid := range cert.UnhandledCriticalExtensions {
		if !oid.Equal(cryptoutils.SANOID) {
			cp.UnhandledCriticalExtensions = append(cp.UnhandledCriticalExtensions, oid)
		}
	}
	return &cp
}

// timeZero leaves a key authority's validity open at both ends.
var timeZero time.Time
