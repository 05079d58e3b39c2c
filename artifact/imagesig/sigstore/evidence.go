package sigstore

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact/imagesig"
)

const intotoPayloadType = "application/vnd.in-toto+json"

// candidate is one signed thing found in the evidence that names the
// subject: a cosign signature layer, a DSSE attestation layer, or a
// Sigstore bundle.
type candidate struct {
	kind          string        // imagesig.KindSignature, imagesig.KindAttestation or imagesig.KindBundle
	where         digest.Digest // the evidence manifest
	predicateType string        // "" for a signature

	// Legacy cosign layers.
	payload    []byte            // simple-signing payload (message signatures)
	sig        []byte            // raw signature bytes
	envelope   *dsse.Envelope    // DSSE attestations
	envBytes   []byte            // the envelope as stored (what cosign timestamps for .att)
	cert       *x509.Certificate // dev.sigstore.cosign/certificate
	tlog       []*tlog.Entry     // dev.sigstore.cosign/bundle
	timestamps [][]byte          // dev.sigstore.cosign/rfc3161timestamp

	// Sigstore bundles.
	bundle *bundle.Bundle
}

// isSignature says the candidate counts as a signature over the subject
// (rather than an attestation).
func (c *candidate) isSignature() bool {
	return c.predicateType == "" || c.predicateType == imagesig.PredicateTypeCosignSign
}

// gathered is what the evidence holds for one subject.
type gathered struct {
	named    bool     // some evidence names the subject
	problems []string // evidence naming the subject that could not be read
	budget   int64    // bytes left to read
}

func (g *gathered) problem(where digest.Digest, format string, args ...any) {
	g.named = true
	g.problems = append(g.problems, oneLine(fmt.Sprintf("evidence %s: %s", short(where), fmt.Sprintf(format, args...))))
}

// oneLine folds a reason onto one line of at most 300 bytes: reasons may
// quote hostile input.
func oneLine(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

func short(d digest.Digest) string {
	s := d.String()
	if i := strings.IndexByte(s, ':'); i >= 0 && len(s) > i+13 {
		return s[:i+13]
	}
	return s
}

var errBudget = errors.New("evidence past the read budget")

// fetchBounded reads desc whole when it is no larger than limit, checking
// its size and digest, and takes its size from the budget.
func (g *gathered) fetchBounded(ctx context.Context, fetch content.Fetcher, desc ocispec.Descriptor, limit int64) ([]byte, error) {
	if desc.Size < 0 || desc.Size > limit {
		return nil, fmt.Errorf("size %d outside 0..%d", desc.Size, limit)
	}
	if desc.Size > g.budget {
		return nil, errBudget
	}
	g.budget -= desc.Size
	if err := desc.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("digest: %w", err)
	}
	if !desc.Digest.Algorithm().Available() {
		return nil, fmt.Errorf("digest algorithm %s not available", desc.Digest.Algorithm())
	}
	return content.FetchAll(ctx, fetch, desc)
}

// gather reads the evidence and calls found with each candidate that names
// subject, one at a time (nothing of it is kept after found returns).
func gather(ctx context.Context, fetch content.Fetcher, subject digest.Digest, evidence []ocispec.Descriptor, found func(*candidate)) (*gathered, error) {
	g := &gathered{budget: imagesig.MaxEvidenceBytes}
	if len(evidence) > imagesig.MaxEvidence {
		evidence = evidence[:imagesig.MaxEvidence]
	}
	for _, desc := range evidence {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		raw, err := g.fetchBounded(ctx, fetch, desc, imagesig.MaxManifestSize)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			// The caller offers it as evidence for subject: fail closed.
			g.problem(desc.Digest, "manifest: %v", err)
			continue
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			g.problem(desc.Digest, "manifest: %v", err)
			continue
		}
		if m.Subject != nil && m.Subject.Digest != subject {
			continue
		}
		declared := m.Subject != nil
		if declared {
			g.named = true
		}
		layers := m.Layers
		if len(layers) > imagesig.MaxLayers {
			layers = layers[:imagesig.MaxLayers]
		}
		for _, l := range layers {
			switch l.MediaType {
			case imagesig.MediaTypeSimpleSigning, imagesig.MediaTypeDSSE:
			default:
				if !isBundleMediaType(l.MediaType) {
					continue
				}
			}
			data, err := g.fetchBounded(ctx, fetch, l, imagesig.MaxLayerSize)
			if err != nil {
				if ctxErr := ctx.Err(); ctxErr != nil {
					return nil, ctxErr
				}
				// A layer that does not read as its descriptor says: the
				// evidence is refused when it claims this subject (a legacy
				// .sig/.att manifest claims it by its tag, which the caller
				// chose).
				g.problem(desc.Digest, "layer %s: %v", short(l.Digest), err)
				continue
			}
			c, names, err := parseLayer(l, data, subject)
			if err != nil {
				// Offered as evidence and unreadable: fail closed.
				g.problem(desc.Digest, "%v", err)
				continue
			}
			if !names && !declared {
				continue // a tag-scheme manifest's layer about another image
			}
			if !names {
				g.problem(desc.Digest, "its payload names another image")
				continue
			}
			c.where = desc.Digest
			g.named = true
			found(c)
		}
	}
	return g, nil
}

func isBundleMediaType(mt string) bool {
	return mt == imagesig.MediaTypeBundle || strings.HasPrefix(mt, "application/vnd.dev.sigstore.bundle+json") ||
		strings.HasPrefix(mt, "application/vnd.dev.sigstore.bundle.v0.")
}

// parseLayer reads one evidence layer. names says it is about subject; a
// layer that cannot be read at all returns an error and names=false (the
// caller decides from the manifest whether that matters).
func parseLayer(l ocispec.Descriptor, data []byte, subject digest.Digest) (*candidate, bool, error) {
	switch {
	case l.MediaType == imagesig.MediaTypeSimpleSigning:
		return parseSimpleSigning(l, data, subject)
	case l.MediaType == imagesig.MediaTypeDSSE:
		return parseDSSE(l, data, subject)
	default:
		return parseBundle(data, subject)
	}
}

// simpleSigning is the cosign signature payload ("critical" part).
type simpleSigning struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

func parseSimpleSigning(l ocispec.Descriptor, data []byte, subject digest.Digest) (*candidate, bool, error) {
	var p simpleSigning
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, false, fmt.Errorf("signature payload: %v", err)
	}
	if p.Critical.Image.DockerManifestDigest != subject.String() {
		return nil, false, nil
	}
	c := &candidate{kind: imagesig.KindSignature, payload: data}
	sig, err := base64.StdEncoding.DecodeString(l.Annotations[imagesig.AnnotationSignature])
	if err != nil || len(sig) == 0 {
		return nil, true, errors.New("signature annotation missing or not base64")
	}
	c.sig = sig
	if err := c.readAnnotations(l.Annotations); err != nil {
		return nil, true, err
	}
	return c, true, nil
}

// statement is the part of an in-toto statement Verify reads itself.
type statement struct {
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
}

func (s *statement) names(subject digest.Digest) bool {
	for _, sub := range s.Subject {
		if strings.EqualFold(sub.Digest[subject.Algorithm().String()], subject.Encoded()) {
			return true
		}
	}
	return false
}

func decodeStatement(env *dsse.Envelope) (*statement, error) {
	if env.PayloadType != intotoPayloadType {
		return nil, fmt.Errorf("DSSE payload type %.64q is not an in-toto statement", env.PayloadType)
	}
	raw, err := env.DecodeB64Payload()
	if err != nil {
		return nil, fmt.Errorf("DSSE payload: %v", err)
	}
	var st statement
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("in-toto statement: %v", err)
	}
	if st.PredicateType == "" {
		return nil, errors.New("in-toto statement without a predicate type")
	}
	return &st, nil
}

func parseDSSE(l ocispec.Descriptor, data []byte, subject digest.Digest) (*candidate, bool, error) {
	var env dsse.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, false, fmt.Errorf("DSSE envelope: %v", err)
	}
	st, err := decodeStatement(&env)
	if err != nil {
		return nil, false, err
	}
	if !st.names(subject) {
		return nil, false, nil
	}
	if len(env.Signatures) != 1 {
		return nil, true, fmt.Errorf("DSSE envelope with %d signatures, want 1", len(env.Signatures))
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		return nil, true, fmt.Errorf("DSSE signature: %v", err)
	}
	c := &candidate{kind: imagesig.KindAttestation, predicateType: st.PredicateType, envelope: &env, envBytes: data, sig: sig}
	if err := c.readAnnotations(l.Annotations); err != nil {
		return nil, true, err
	}
	return c, true, nil
}

// rekorBundle is cosign's dev.sigstore.cosign/bundle annotation: a Rekor
// entry and its signed entry timestamp (SET).
type rekorBundle struct {
	SignedEntryTimestamp []byte `json:"SignedEntryTimestamp"`
	Payload              struct {
		Body           string `json:"body"`
		IntegratedTime int64  `json:"integratedTime"`
		LogIndex       int64  `json:"logIndex"`
		LogID          string `json:"logID"`
	} `json:"Payload"`
}

// readAnnotations reads the certificate, Rekor bundle and RFC 3161
// timestamp cosign puts on a signature or attestation layer.
func (c *candidate) readAnnotations(a map[string]string) error {
	if s := a[imagesig.AnnotationCertificate]; s != "" {
		certs, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(s))
		if err != nil || len(certs) == 0 {
			return errors.New("certificate annotation is not a PEM certificate")
		}
		c.cert = certs[0]
	}
	if s := a[imagesig.AnnotationBundle]; s != "" {
		var rb rekorBundle
		if err := json.Unmarshal([]byte(s), &rb); err != nil {
			return fmt.Errorf("transparency log bundle: %v", err)
		}
		body, err := base64.StdEncoding.DecodeString(rb.Payload.Body)
		if err != nil {
			return fmt.Errorf("transparency log bundle body: %v", err)
		}
		logID, err := hex.DecodeString(rb.Payload.LogID)
		if err != nil {
			return fmt.Errorf("transparency log bundle log ID: %v", err)
		}
		entry, err := newTlogEntry(body, rb.Payload.IntegratedTime, rb.Payload.LogIndex, logID, rb.SignedEntryTimestamp)
		if err != nil {
			return fmt.Errorf("transparency log entry: %v", err)
		}
		c.tlog = append(c.tlog, entry)
	}
	if s := a[imagesig.AnnotationTimestamp]; s != "" {
		var ts struct {
			SignedRFC3161Timestamp []byte `json:"SignedRFC3161Timestamp"`
		}
		if err := json.Unmarshal([]byte(s), &ts); err != nil || len(ts.SignedRFC3161Timestamp) == 0 {
			return errors.New("RFC 3161 timestamp annotation unreadable")
		}
		c.timestamps = append(c.timestamps, ts.SignedRFC3161Timestamp)
	}
	return nil
}

// newTlogEntry parses a Rekor entry, turning a panic of the parsers on
// hostile input into an error.
func newTlogEntry(body []byte, integratedTime, logIndex int64, logID, set []byte) (e *tlog.Entry, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("malformed entry")
		}
	}()
	return tlog.NewEntry(body, integratedTime, logIndex, logID, set, nil)
}

func parseBundle(data []byte, subject digest.Digest) (c *candidate, names bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, names, err = nil, false, errors.New("Sigstore bundle: malformed")
		}
	}()
	var b bundle.Bundle
	if err := b.UnmarshalJSON(data); err != nil {
		return nil, false, fmt.Errorf("Sigstore bundle: %v", err)
	}
	c = &candidate{kind: imagesig.KindBundle, bundle: &b}
	sc, err := b.SignatureContent()
	if err != nil {
		return nil, false, fmt.Errorf("Sigstore bundle: %v", err)
	}
	if env := sc.EnvelopeContent(); env != nil {
		st, err := decodeStatement(env.RawEnvelope())
		if err != nil {
			return nil, false, fmt.Errorf("Sigstore bundle: %v", err)
		}
		if !st.names(subject) {
			return nil, false, nil
		}
		c.predicateType = st.PredicateType
		return c, true, nil
	}
	ms := sc.MessageSignatureContent()
	if ms == nil || subject.Algorithm() != digest.SHA256 || !strings.EqualFold(ms.DigestAlgorithm(), "SHA2_256") ||
		hex.EncodeToString(ms.Digest()) != subject.Encoded() {
		return nil, false, nil
	}
	return c, true, nil
}
