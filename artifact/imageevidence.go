package artifact

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image evidence: at create, the publisher's signatures, attestations and
// Sigstore bundles found at an image's source for its original digest, its
// stored digest and each platform manifest kept — OCI 1.1 referrers (the
// referrers API, its tag-schema fallback, or a layout's predecessors) of a
// cosign or Sigstore artifact type, and cosign's tags sha256-<hex>.sig and
// .att in the image's repository — are added to the package graph as they
// are, listed in the root with kind image-signature, and recorded in
// ferry.json (Image.Signatures). Mirror copies them next to the image,
// giving tag-scheme evidence its tag again, so cosign finds it there.
//
// When create keeps only some platforms of an index, the stored digest
// differs from the one the publisher signed. Evidence naming the original
// index then comes with that index's bytes, so an offline check can prove
// each kept manifest is a child of the signed index: a small referrer
// manifest of the stored image (artifactType ArtifactTypeSignedIndex),
// whose one layer (media type MediaTypeSignedIndex, so that no graph walker
// descends into it) is the original index, its digest the original digest.
// Its root entry is of kind image-signature with AnnotationSignedIndex
// naming the original digest; ferry.json counts its size in each
// signature of that digest.

// Media types, annotations and bounds of image evidence.
const (
	// ArtifactTypeCosignSignature is the artifactType of a cosign
	// signature referrer (cosign sign --registry-referrers-mode=oci-1-1).
	ArtifactTypeCosignSignature = "application/vnd.dev.cosign.artifact.sig.v1+json"
	// ArtifactTypeCosignAttestation is cosign's own attestation artifactType.
	ArtifactTypeCosignAttestation = "application/vnd.dev.cosign.artifact.att.v1+json"
	// ArtifactTypeInToto is the artifactType cosign gives attestation
	// referrers (DSSE envelopes holding in-toto statements).
	ArtifactTypeInToto = "application/vnd.in-toto+json"
	// ArtifactTypeDSSE is a DSSE envelope, another attestation artifactType.
	ArtifactTypeDSSE = "application/vnd.dsse.envelope.v1+json"
	// ArtifactTypeSigstoreBundle is the prefix of Sigstore bundle media
	// types (application/vnd.dev.sigstore.bundle.v0.3+json, and
	// application/vnd.dev.sigstore.bundle+json;version=0.3).
	ArtifactTypeSigstoreBundle = "application/vnd.dev.sigstore.bundle"

	// ArtifactTypeSignedIndex marks the manifest carrying an image's
	// original index; MediaTypeSignedIndex is its one layer, the index.
	ArtifactTypeSignedIndex = "application/vnd.ferry.image.signed-index.v1+json"
	MediaTypeSignedIndex    = "application/vnd.ferry.image.signed-index.v1+json"

	// AnnotationSignatureSubject is the digest an image-signature entry of
	// the root names (its subject, or the digest of its cosign tag).
	AnnotationSignatureSubject = "dev.ferry.image.signature.subject"
	// AnnotationSignatureTag is the cosign tag an image-signature entry
	// was found under, sha256-<hex>.sig or .att.
	AnnotationSignatureTag = "dev.ferry.image.signature.tag"
	// AnnotationSignedIndex is set on the root entry carrying an image's
	// original index to that index's digest.
	AnnotationSignedIndex = "dev.ferry.image.signed-index"

	// MaxImageEvidence bounds the evidence manifests of one image (64).
	MaxImageEvidence = 64
	// MaxEvidenceBlobSize bounds each config and layer of an evidence
	// manifest (16 MiB); MaxEvidenceLayers their number (256).
	MaxEvidenceBlobSize = 16 << 20
	MaxEvidenceLayers   = 256
)

// AnnotationSignedIndexMediaType, on the layer of a signed-index carrier,
// is the original index's media type.
const AnnotationSignedIndexMediaType = "dev.ferry.image.media-type"

// checkImageSignatures checks the image-signature entries of a package
// root against the graph and ferry.json: each an image manifest within the
// evidence bounds, naming (as its subject, or by its cosign tag) a
// manifest of its image's graph or the image's original digest, recorded
// in ferry.json with that subject, kind and artifactType — and every
// signature ferry.json records is such an entry. A signed-index carrier
// must hold the image's original index as its one layer and name the
// stored image. node returns the verified bytes of a manifest or index of
// the graph.
func checkImageSignatures(cfg *Config, root *ocispec.Index, node func(digest.Digest) ([]byte, bool)) error {
	type img struct {
		rec   *Image
		graph map[digest.Digest]bool
	}
	images := map[string]*img{} // component|ref
	for ci := range cfg.Components {
		for ii := range cfg.Components[ci].Images {
			i := &cfg.Components[ci].Images[ii]
			images[cfg.Components[ci].Name+"|"+i.Ref] = &img{rec: i, graph: map[digest.Digest]bool{}}
		}
	}
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] != KindImage {
			continue
		}
		im := images[m.Annotations[AnnotationComponent]+"|"+m.Annotations[AnnotationImageRef]]
		if im == nil {
			continue // checkConfig reports images ferry.json does not list
		}
		im.graph[m.Digest] = true
		if data, ok := node(m.Digest); ok && graph.IsIndex(m.MediaType) {
			kids, _ := graph.Children(m.MediaType, data)
			for _, k := range kids {
				im.graph[k.Digest] = true
			}
		}
	}
	entries := map[string]bool{} // component|ref|digest of checked entries
	counts := map[*img]int{}
	for _, m := range root.Manifests {
		a := m.Annotations
		if a[AnnotationKind] != KindImageSignature {
			continue
		}
		ref := a[AnnotationImageRef]
		im := images[a[AnnotationComponent]+"|"+ref]
		if im == nil {
			return fmt.Errorf("%w: signature %s names image %s, which %s does not list", ErrCorrupt, m.Digest, ref, ConfigFileName)
		}
		if counts[im]++; counts[im] > MaxImageEvidence+1 {
			return fmt.Errorf("%w: image %s has more than %d signatures", ErrCorrupt, ref, MaxImageEvidence)
		}
		data, ok := node(m.Digest)
		if !ok || !graph.IsManifest(m.MediaType) || m.Size > MaxManifestSize {
			return fmt.Errorf("%w: signature %s of %s is not an image manifest", ErrCorrupt, m.Digest, ref)
		}
		var sm ocispec.Manifest
		if err := json.Unmarshal(data, &sm); err != nil {
			return fmt.Errorf("%w: signature %s of %s: %w", ErrCorrupt, m.Digest, ref, err)
		}
		if err := CheckEvidenceShape(&sm); err != nil {
			return fmt.Errorf("%w: signature %s of %s: %w", ErrCorrupt, m.Digest, ref, err)
		}
		if a[AnnotationSignedIndex] != "" {
			if a[AnnotationSignedIndex] != im.rec.OriginalDigest.String() || im.rec.OriginalDigest == im.rec.Digest ||
				sm.ArtifactType != ArtifactTypeSignedIndex || len(sm.Layers) != 1 || sm.Layers[0].Digest != im.rec.OriginalDigest ||
				sm.Layers[0].MediaType != MediaTypeSignedIndex || sm.Subject == nil || sm.Subject.Digest != im.rec.Digest {
				return fmt.Errorf("%w: signed index %s of %s does not carry its original index %s", ErrCorrupt, m.Digest, ref, im.rec.OriginalDigest)
			}
			continue
		}
		subject := digest.Digest(a[AnnotationSignatureSubject])
		if !im.graph[subject] && subject != im.rec.OriginalDigest {
			return fmt.Errorf("%w: signature %s: its subject %.80q is not a manifest of image %s", ErrCorrupt, m.Digest, subject, ref)
		}
		tag := a[AnnotationSignatureTag]
		kind := tagKind(tag)
		switch {
		case tag != "" && (kind == "" || tag != CosignTag(subject, tag[strings.LastIndexByte(tag, '.'):])):
			return fmt.Errorf("%w: signature %s of %s: tag %.80q is not cosign's for %s", ErrCorrupt, m.Digest, ref, tag, subject)
		case tag == "":
			kind = EvidenceKind(ManifestArtifactType(&sm))
			if kind == "" || sm.Subject == nil || sm.Subject.Digest != subject || m.ArtifactType != ManifestArtifactType(&sm) {
				return fmt.Errorf("%w: signature %s of %s is not a signature or attestation referrer of %s", ErrCorrupt, m.Digest, ref, subject)
			}
		}
		rec, ok := imageSignature(im.rec, m.Digest)
		if !ok || rec.Subject != subject || rec.Kind != kind || rec.Tag != tag || rec.ArtifactType != m.ArtifactType {
			return fmt.Errorf("%w: signature %s of %s is not the one %s records", ErrCorrupt, m.Digest, ref, ConfigFileName)
		}
		entries[a[AnnotationComponent]+"|"+ref+"|"+m.Digest.String()] = true
	}
	for _, c := range cfg.Components {
		for _, i := range c.Images {
			for _, s := range i.Signatures {
				if !entries[c.Name+"|"+i.Ref+"|"+s.Digest.String()] {
					return fmt.Errorf("%w: %s lists what the package does not hold: %s %s of %s", ErrCorrupt, ConfigFileName, s.Kind, s.Digest, i.Ref)
				}
			}
		}
	}
	return nil
}

// imageSignature is the record of img's signature d.
func imageSignature(img *Image, d digest.Digest) (ImageSignature, bool) {
	for _, s := range img.Signatures {
		if s.Digest == d {
			return s, true
		}
	}
	return ImageSignature{}, false
}
