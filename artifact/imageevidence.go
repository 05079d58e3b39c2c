package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/artifact/imagesig"
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

// evidenceKind is the imagesig kind of evidence of artifactType t, or "".
func evidenceKind(t string) string {
	switch {
	case t == ArtifactTypeCosignSignature:
		return imagesig.KindSignature
	case t == ArtifactTypeCosignAttestation || t == ArtifactTypeInToto || t == ArtifactTypeDSSE:
		return imagesig.KindAttestation
	case strings.HasPrefix(t, ArtifactTypeSigstoreBundle):
		return imagesig.KindBundle
	}
	return ""
}

// cosignTags are cosign's tag-scheme suffixes and the kind each holds.
var cosignTags = []struct{ suffix, kind string }{
	{".sig", imagesig.KindSignature},
	{".att", imagesig.KindAttestation},
}

// CosignTag is cosign's tag for evidence of kind suffix (".sig", ".att")
// of the manifest d: sha256-<hex><suffix>.
func CosignTag(d digest.Digest, suffix string) string {
	return d.Algorithm().String() + "-" + d.Encoded() + suffix
}

// tagKind is the kind of evidence cosign stores under tag, or "".
func tagKind(tag string) string {
	for _, t := range cosignTags {
		if strings.HasSuffix(tag, t.suffix) {
			return t.kind
		}
	}
	return ""
}

// evidenceManifest is one piece of evidence found at create.
type evidenceManifest struct {
	desc         ocispec.Descriptor
	data         []byte
	manifest     ocispec.Manifest
	subject      digest.Digest
	tag          string
	kind         string
	artifactType string
}

// predecessorFinder is what an OCI layout store offers to find referrers.
type predecessorFinder interface {
	Predecessors(ctx context.Context, node ocispec.Descriptor) ([]ocispec.Descriptor, error)
}

// findEvidence finds the evidence src holds for subjects, each checked
// against the bounds; the first error names nothing (the caller names the
// image).
func findEvidence(ctx context.Context, src content.ReadOnlyStorage, subjects []ocispec.Descriptor) ([]evidenceManifest, error) {
	var found []evidenceManifest
	seen := map[digest.Digest]bool{}
	keep := func(e evidenceManifest) error {
		if seen[e.desc.Digest] {
			return nil
		}
		if len(found) >= MaxImageEvidence {
			return fmt.Errorf("more than %d signature and attestation manifests", MaxImageEvidence)
		}
		seen[e.desc.Digest] = true
		found = append(found, e)
		return nil
	}
	for _, s := range subjects {
		s := ocispec.Descriptor{MediaType: s.MediaType, Digest: s.Digest, Size: s.Size}
		// cosign's tag scheme.
		if r, ok := src.(content.Resolver); ok {
			for _, t := range cosignTags {
				tag := CosignTag(s.Digest, t.suffix)
				desc, err := r.Resolve(ctx, tag)
				switch {
				case errors.Is(err, errdef.ErrNotFound):
					continue
				case err != nil:
					return nil, fmt.Errorf("resolve %s: %w", tag, err)
				}
				e, err := fetchEvidence(ctx, src, desc, s.Digest, false)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", tag, err)
				}
				e.tag, e.kind = tag, t.kind
				if err := keep(e); err != nil {
					return nil, err
				}
			}
		}
		// OCI 1.1 referrers.
		refs, err := listReferrers(ctx, src, s)
		if err != nil {
			return nil, listFailed("referrers of "+s.Digest.String(), err)
		}
		for _, d := range refs {
			e, err := fetchEvidence(ctx, src, d, s.Digest, true)
			if err != nil {
				return nil, fmt.Errorf("referrer %s of %s: %w", d.Digest, s.Digest, err)
			}
			if e.kind == "" {
				continue // not ours to carry: an SBOM, a vulnerability report, …
			}
			if err := keep(e); err != nil {
				return nil, err
			}
		}
	}
	return found, nil
}

// listReferrers lists the manifests naming subject whose artifactType is
// evidence, at most MaxImageEvidence+1 of them. A registry without the
// referrers API falls back to the tag schema; no referrers is no error.
func listReferrers(ctx context.Context, src content.ReadOnlyStorage, subject ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	var out []ocispec.Descriptor
	errEnough := errors.New("enough")
	add := func(ds []ocispec.Descriptor) error {
		for _, d := range ds {
			if evidenceKind(d.ArtifactType) == "" {
				continue
			}
			out = append(out, d)
			if len(out) > MaxImageEvidence {
				return errEnough
			}
		}
		return nil
	}
	switch s := src.(type) {
	case registry.ReferrerLister:
		err := ListReferrers(ctx, s, subject, "", add)
		switch {
		case errors.Is(err, errEnough):
			return nil, fmt.Errorf("more than %d signature and attestation referrers", MaxImageEvidence)
		case errors.Is(err, errdef.ErrNotFound), errors.Is(err, errdef.ErrUnsupported):
			return nil, nil
		case err != nil:
			return nil, err
		}
	case predecessorFinder:
		preds, err := s.Predecessors(ctx, subject)
		if err != nil {
			return nil, err
		}
		// A layout's predecessors are referrers and the indexes holding
		// the subject; their artifactType is in the manifest only.
		var cands []ocispec.Descriptor
		for _, p := range preds {
			if p.MediaType != ocispec.MediaTypeImageManifest {
				continue
			}
			data, err := fetchSmall(ctx, src, p)
			if err != nil {
				return nil, err
			}
			var m ocispec.Manifest
			if json.Unmarshal(data, &m) != nil || m.Subject == nil || m.Subject.Digest != subject.Digest {
				continue
			}
			p.ArtifactType = manifestArtifactType(&m)
			cands = append(cands, p)
		}
		if err := add(cands); err != nil {
			return nil, fmt.Errorf("more than %d signature and attestation referrers", MaxImageEvidence)
		}
	}
	// A registry's order is not the same each time; ferry.json's is.
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	return out, nil
}

// fetchEvidence fetches the evidence manifest desc (found for subject, as a
// referrer or by tag) and checks its shape: an image manifest of at most
// MaxManifestSize, at most MaxEvidenceLayers layers, config and each layer
// at most MaxEvidenceBlobSize; a referrer must name subject.
func fetchEvidence(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor, subject digest.Digest, referrer bool) (evidenceManifest, error) {
	e := evidenceManifest{subject: subject}
	if !isManifest(desc.MediaType) {
		return e, fmt.Errorf("%s is a %q, not an image manifest", desc.Digest, desc.MediaType)
	}
	data, err := fetchSmall(ctx, src, desc)
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(data, &e.manifest); err != nil {
		return e, fmt.Errorf("%s: parse manifest: %w", desc.Digest, err)
	}
	e.data = data
	if err := checkEvidenceShape(&e.manifest); err != nil {
		return e, fmt.Errorf("%s: %w", desc.Digest, err)
	}
	e.desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	if referrer {
		if e.manifest.Subject == nil || e.manifest.Subject.Digest != subject {
			return e, fmt.Errorf("%s is listed as a referrer of %s but does not name it as its subject", desc.Digest, subject)
		}
		e.artifactType = manifestArtifactType(&e.manifest)
		e.kind = evidenceKind(e.artifactType)
	}
	return e, nil
}

// manifestArtifactType is m's artifactType, else its config's media type.
func manifestArtifactType(m *ocispec.Manifest) string {
	if m.ArtifactType != "" {
		return m.ArtifactType
	}
	return m.Config.MediaType
}

// checkEvidenceShape bounds an evidence manifest's blobs.
func checkEvidenceShape(m *ocispec.Manifest) error {
	if len(m.Layers) > MaxEvidenceLayers {
		return fmt.Errorf("%d layers, more than the %d a signature manifest may have", len(m.Layers), MaxEvidenceLayers)
	}
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := checkDescriptor(d); err != nil {
			return err
		}
		if isContainer(d.MediaType) {
			return fmt.Errorf("%s: a signature manifest's blob may not be a %q", d.Digest, d.MediaType)
		}
		if d.Size > MaxEvidenceBlobSize {
			return fmt.Errorf("blob %s is %d bytes, more than the %d a signature's may be", d.Digest, d.Size, MaxEvidenceBlobSize)
		}
	}
	return nil
}

// imageEvidence adds the evidence src holds for an image (its original
// descriptor orig with bytes origData, stored as stored, with the platform
// manifests kept) to the package, and returns the root entries and the
// records for ferry.json.
func (b *builder) imageEvidence(ctx context.Context, src content.ReadOnlyStorage, component, ref string, orig ocispec.Descriptor, origData []byte, stored ocispec.Descriptor, kept []keptManifest) ([]ocispec.Descriptor, []ImageSignature, error) {
	subjects := []ocispec.Descriptor{orig}
	if stored.Digest != orig.Digest {
		subjects = append(subjects, stored)
	}
	for _, k := range kept {
		if k.desc.Digest != orig.Digest && k.desc.Digest != stored.Digest {
			subjects = append(subjects, k.desc)
		}
	}
	found, err := findEvidence(ctx, src, subjects)
	if err != nil {
		return nil, nil, fmt.Errorf("signatures of image %s: %w", ref, err)
	}
	var entries []ocispec.Descriptor
	var recs []ImageSignature
	signsOriginal := false
	for _, e := range found {
		m := e.manifest
		size := e.desc.Size
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			d := ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
			size += d.Size
			b.add(&blob{desc: d, open: func(ctx context.Context) (io.ReadCloser, error) { return src.Fetch(ctx, d) }})
		}
		b.add(&blob{desc: e.desc, data: e.data})
		entry := e.desc
		entry.ArtifactType = e.artifactType
		entry.Annotations = map[string]string{
			AnnotationKind: KindImageSignature, AnnotationComponent: component, AnnotationImageRef: ref,
			AnnotationSignatureSubject: e.subject.String(),
		}
		if e.tag != "" {
			entry.Annotations[AnnotationSignatureTag] = e.tag
		}
		entries = append(entries, entry)
		recs = append(recs, ImageSignature{Kind: e.kind, Subject: e.subject, Digest: e.desc.Digest, ArtifactType: e.artifactType, Tag: e.tag, Size: size})
		signsOriginal = signsOriginal || (e.subject == orig.Digest && stored.Digest != orig.Digest)
		b.progress(Progress{Phase: PhaseResolve, Item: e.kind + " " + ref + " " + e.subject.String()})
	}
	if signsOriginal {
		carrier, size, err := b.signedIndex(component, ref, orig, origData, stored)
		if err != nil {
			return nil, nil, err
		}
		entries = append(entries, carrier)
		for i := range recs {
			if recs[i].Subject == orig.Digest {
				recs[i].Size += size
			}
		}
	}
	return entries, recs, nil
}

// signedIndex adds the manifest carrying an image's original index (see
// the comment at the top of this file) and returns its root entry and size
// with its blobs.
func (b *builder) signedIndex(component, ref string, orig ocispec.Descriptor, origData []byte, stored ocispec.Descriptor) (ocispec.Descriptor, int64, error) {
	layer := ocispec.Descriptor{MediaType: MediaTypeSignedIndex, Digest: orig.Digest, Size: int64(len(origData)),
		Annotations: map[string]string{AnnotationSignedIndexMediaType: orig.MediaType}}
	b.add(&blob{desc: ocispec.Descriptor{MediaType: MediaTypeSignedIndex, Digest: orig.Digest, Size: layer.Size}, data: origData})
	empty := b.addData(ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data)
	empty.Data = ocispec.DescriptorEmptyJSON.Data
	subject := ocispec.Descriptor{MediaType: stored.MediaType, Digest: stored.Digest, Size: stored.Size}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactTypeSignedIndex,
		Config:       empty,
		Layers:       []ocispec.Descriptor{layer},
		Subject:      &subject,
	}
	md, _, err := b.addJSON(ocispec.MediaTypeImageManifest, m)
	if err != nil {
		return md, 0, err
	}
	md.ArtifactType = ArtifactTypeSignedIndex
	md.Annotations = map[string]string{
		AnnotationKind: KindImageSignature, AnnotationComponent: component, AnnotationImageRef: ref,
		AnnotationSignedIndex: orig.Digest.String(),
	}
	return md, md.Size + empty.Size + layer.Size, nil
}

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
		if data, ok := node(m.Digest); ok && isIndex(m.MediaType) {
			kids, _ := children(m.MediaType, data)
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
		if !ok || !isManifest(m.MediaType) || m.Size > MaxManifestSize {
			return fmt.Errorf("%w: signature %s of %s is not an image manifest", ErrCorrupt, m.Digest, ref)
		}
		var sm ocispec.Manifest
		if err := json.Unmarshal(data, &sm); err != nil {
			return fmt.Errorf("%w: signature %s of %s: %w", ErrCorrupt, m.Digest, ref, err)
		}
		if err := checkEvidenceShape(&sm); err != nil {
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
			return fmt.Errorf("%w: signature %s: its subject %q is not a manifest of image %s", ErrCorrupt, m.Digest, subject, ref)
		}
		tag := a[AnnotationSignatureTag]
		kind := tagKind(tag)
		switch {
		case tag != "" && (kind == "" || tag != CosignTag(subject, tag[strings.LastIndexByte(tag, '.'):])):
			return fmt.Errorf("%w: signature %s of %s: tag %q is not cosign's for %s", ErrCorrupt, m.Digest, ref, tag, subject)
		case tag == "":
			kind = evidenceKind(manifestArtifactType(&sm))
			if kind == "" || sm.Subject == nil || sm.Subject.Digest != subject || m.ArtifactType != manifestArtifactType(&sm) {
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
