package artifact

import (
	"crypto/ecdsa"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Signatures are cosign's: one OCI image manifest per signed digest, tagged
// sha256-<hex>.sig (SignatureTag), with one layer per signature. A layer is
// the simple-signing payload naming the signed digest; its annotation holds
// the base64 signature over the payload's bytes. No certificate, bundle or
// transparency-log entry is made: the key is the only trust root (air gap).
const (
	// MediaTypeSimpleSigning is the media type of a cosign signature payload.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationCosignSignature holds a layer's base64 signature.
	AnnotationCosignSignature = "dev.cosignproject.cosign/signature"
)

// Errors of signature verification; match them with errors.Is.
var (
	// ErrNoSignature means the package carries no signature over its root.
	ErrNoSignature = errors.New("no signature")
	// ErrSignatureLeftBehind means a repository holds a package without
	// its signature, which a copy of the package alone leaves behind.
	ErrSignatureLeftBehind = errors.New("the copy that made this repository left it behind")
	// ErrSignature means signatures are there but none is valid for the key.
	ErrSignature = errors.New("signature not valid")
)

// SignatureTag is the tag cosign gives the signature of a digest:
// sha256-<hex>.sig.
func SignatureTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded() + ".sig"
}

// signatureEntries returns the entries of index that hold root's signatures.
func signatureEntries(root digest.Digest, index []ocispec.Descriptor) []ocispec.Descriptor {
	tag := SignatureTag(root)
	var out []ocispec.Descriptor
	for _, d := range index {
		if d.Digest != root && d.Annotations[ocispec.AnnotationRefName] == tag {
			out = append(out, d)
		}
	}
	return out
}

// checkSignatureManifest checks that a signature manifest stored for root
// is shaped as cosign makes it, within ferry's limits: a small config and 1
// to MaxSignatures layers, each a simple-signing payload of at most
// MaxSignaturePayload bytes naming root. fetch returns a layer's bytes,
// verified. Whether a signature is valid is Verify's question; this one is
// whether the entry holds signatures over this root and nothing else, since
// no signature covers it.
func checkSignatureManifest(root digest.Digest, data []byte, fetch func(ocispec.Descriptor) ([]byte, error)) error {
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return corruptIn("signature manifest", err)
	}
	switch {
	case m.Config.Size > MaxSignaturePayload:
		return fmt.Errorf("%w: signature manifest's config %s is %d bytes, more than %d", ErrCorrupt, m.Config.Digest, m.Config.Size, MaxSignaturePayload)
	case len(m.Layers) == 0:
		return fmt.Errorf("%w: signature manifest holds no signature", ErrCorrupt)
	case len(m.Layers) > MaxSignatures:
		return fmt.Errorf("%w: signature manifest holds %d signatures, more than %d", ErrCorrupt, len(m.Layers), MaxSignatures)
	}
	for i, l := range m.Layers {
		n := i + 1
		if l.MediaType != MediaTypeSimpleSigning {
			return fmt.Errorf("%w: signature %d (%s) is a %.64q, not a cosign signature payload", ErrCorrupt, n, l.Digest, l.MediaType)
		}
		if l.Size > MaxSignaturePayload {
			return fmt.Errorf("%w: signature %d (%s) is %d bytes, more than %d", ErrCorrupt, n, l.Digest, l.Size, MaxSignaturePayload)
		}
		body, err := fetch(l)
		if err != nil {
			return err
		}
		var p payload.SimpleContainerImage
		if err := json.Unmarshal(body, &p); err != nil || p.Critical.Type != payload.CosignSignatureType {
			return fmt.Errorf("%w: signature %d (%s) is not a cosign signature payload", ErrCorrupt, n, l.Digest)
		}
		if p.Critical.Image.DockerManifestDigest != root.String() {
			return fmt.Errorf("%w: signature %d is over %s, not the package root %s", ErrSignature, n, p.Critical.Image.DockerManifestDigest, root)
		}
	}
	if m.Subject != nil && m.Subject.Digest != root {
		return fmt.Errorf("%w: signature manifest's subject is %s, not the package root %s", ErrSignature, m.Subject.Digest, root)
	}
	return nil
}

// signature is one cosign signature as a signature manifest holds it: the
// simple-signing payload, and its layer (media type, annotations) whose
// AnnotationCosignSignature annotation is the base64 signature over the
// payload's bytes.
type signature struct {
	payload []byte
	layer   ocispec.Descriptor
}

// readSignatures parses signature manifests into their signatures, fetching
// each payload (fetch must verify it against its descriptor).
func readSignatures(manifests [][]byte, fetch func(ocispec.Descriptor) ([]byte, error)) ([]signature, error) {
	var sigs []signature
	for _, data := range manifests {
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, corruptIn("signature manifest", err)
		}
		for _, l := range m.Layers {
			body, err := fetch(l)
			if err != nil {
				return nil, err
			}
			sigs = append(sigs, signature{payload: body, layer: l})
		}
	}
	return sigs, nil
}

// signatureImage is a signature manifest ready to store: its descriptor and
// every blob it needs, by digest.
type signatureImage struct {
	desc  ocispec.Descriptor
	blobs map[digest.Digest][]byte
}

// ArtifactTypeSignature is the artifact type of a signature manifest, as
// cosign names it in its OCI 1.1 mode.
const ArtifactTypeSignature = "application/vnd.dev.cosign.artifact.sig.v1+json"

// signatureConfig is the config of a signature manifest as cosign writes
// it (an empty image's config with one history entry and one diff ID per
// layer), so that a manifest ferry makes is byte for byte the one cosign
// makes for the same signatures.
type signatureConfig struct {
	Architecture string             `json:"architecture"`
	Created      string             `json:"created"`
	History      []signatureHistory `json:"history"`
	OS           string             `json:"os"`
	RootFS       struct {
		Type    string          `json:"type"`
		DiffIDs []digest.Digest `json:"diff_ids"`
	} `json:"rootfs"`
	Config struct{} `json:"config"`
}

// signatureHistory is one history entry of a signatureConfig.
type signatureHistory struct {
	Created string `json:"created"`
}

// zeroTime is how cosign's empty image states its creation time.
const zeroTime = "0001-01-01T00:00:00Z"

// newSignatureImage builds the signature manifest holding sigs over root as
// cosign builds it (the same bytes), so that either tool can append to it,
// and makes it an OCI 1.1 referrer of root too: its subject is root and its
// artifact type ArtifactTypeSignature. Tagged sha256-<hex>.sig, it is where
// `cosign verify` looks; as a referrer, `oras copy -r`, `regctl image copy
// --referrers` and `oras discover` carry and show it with the package.
func newSignatureImage(root ocispec.Descriptor, sigs []signature) (*signatureImage, error) {
	cfg := signatureConfig{Created: zeroTime}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []digest.Digest{}
	blobs := map[digest.Digest][]byte{}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactTypeSignature,
		Layers:       []ocispec.Descriptor{},
	}
	for _, s := range sigs {
		l := s.layer
		l.Digest, l.Size = digest.FromBytes(s.payload), int64(len(s.payload))
		if l.MediaType == "" {
			l.MediaType = MediaTypeSimpleSigning
		}
		m.Layers = append(m.Layers, l)
		blobs[l.Digest] = s.payload
		cfg.History = append(cfg.History, signatureHistory{Created: zeroTime})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.Digest)
	}
	config, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	m.Config = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))}
	subject := rootDescriptor(root)
	m.Subject = &subject
	manifest, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	blobs[m.Config.Digest] = config
	blobs[digest.FromBytes(manifest)] = manifest
	return &signatureImage{
		desc:  ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: ArtifactTypeSignature, Digest: digest.FromBytes(manifest), Size: int64(len(manifest))},
		blobs: blobs,
	}, nil
}

// signPayload signs root with signer: the cosign simple-signing payload
// naming root, with the package's identity, and its signature as a cosign
// layer.
func signPayload(signer Signer, root digest.Digest, identity string, cfg *Config) (signature, error) {
	body, err := json.Marshal(payload.SimpleContainerImage{
		Critical: payload.Critical{
			Identity: payload.Identity{DockerReference: identity},
			Image:    payload.Image{DockerManifestDigest: root.String()},
			Type:     payload.CosignSignatureType,
		},
		Optional: map[string]any{AnnotationPackageName: cfg.Name, AnnotationPackageVersion: cfg.Version},
	})
	if err != nil {
		return signature{}, err
	}
	sig, err := signer.SignPayload(body)
	if err != nil {
		return signature{}, fmt.Errorf("sign with %s: %w", signer.KeyName(), err)
	}
	return signature{payload: body, layer: ocispec.Descriptor{
		MediaType:   MediaTypeSimpleSigning,
		Annotations: map[string]string{AnnotationCosignSignature: base64.StdEncoding.EncodeToString(sig)},
	}}, nil
}

// VerifiedSignature is a signature that checked out.
type VerifiedSignature struct {
	Key     string        `json:"key"`
	Payload digest.Digest `json:"payload"`
}

// checkSignatures returns the signatures in sigs that one of keys made over
// root. When none is valid the error says why, the most telling reason
// first: a valid signature over another digest, one by another key, a
// malformed one, or none at all.
func checkSignatures(root digest.Digest, sigs []signature, keys []Verifier) ([]VerifiedSignature, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no public key to verify with", ErrKey)
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("%w over the package root %s", ErrNoSignature, root)
	}
	var (
		valid               []VerifiedSignature
		otherDigest, badSig error
		byOther             int
	)
	for i, s := range sigs {
		n := i + 1
		body := s.payload
		raw, err := base64.StdEncoding.DecodeString(s.layer.Annotations[AnnotationCosignSignature])
		if err != nil || len(raw) == 0 {
			badSig = fmt.Errorf("%w: bad signature %d: not base64-encoded signature bytes", ErrSignature, n)
			continue
		}
		for _, k := range keys {
			if err := k.VerifyPayload(body, raw); err != nil {
				if malformedECDSA(k, raw) {
					badSig = fmt.Errorf("%w: bad signature %d: not a well-formed ECDSA signature", ErrSignature, n)
				} else {
					byOther++
				}
				continue
			}
			var p payload.SimpleContainerImage
			if err := json.Unmarshal(body, &p); err != nil || p.Critical.Type != payload.CosignSignatureType {
				badSig = fmt.Errorf("%w: bad signature %d: its payload is not a cosign signature payload", ErrSignature, n)
				continue
			}
			if p.Critical.Image.DockerManifestDigest != root.String() {
				otherDigest = fmt.Errorf("%w: signature %d by %s is over %s, not the package root %s", ErrSignature, n, k.KeyName(), p.Critical.Image.DockerManifestDigest, root)
				continue
			}
			valid = append(valid, VerifiedSignature{Key: k.KeyName(), Payload: digest.FromBytes(body)})
		}
	}
	switch {
	case len(valid) > 0:
		return valid, nil
	case otherDigest != nil:
		return nil, otherDigest
	case byOther > 0:
		return nil, fmt.Errorf("%w: signed by another key: none of %d signature(s) verifies with %s", ErrSignature, len(sigs), keyNames(keys))
	case badSig != nil:
		return nil, badSig
	}
	return nil, fmt.Errorf("%w over the package root %s", ErrNoSignature, root)
}

func keyNames(keys []Verifier) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.KeyName()
	}
	return strings.Join(names, ", ")
}

// malformedECDSA reports whether raw cannot be an ECDSA signature for an
// ECDSA key: not one DER SEQUENCE of two positive integers.
func malformedECDSA(k Verifier, raw []byte) bool {
	if _, ok := k.PublicKey().(*ecdsa.PublicKey); !ok {
		return false
	}
	var s struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(raw, &s)
	return err != nil || len(rest) > 0 || s.R.Sign() <= 0 || s.S.Sign() <= 0
}
