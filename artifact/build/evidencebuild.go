package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
)

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
		if len(found) >= artifact.MaxImageEvidence {
			return fmt.Errorf("more than %d signature and attestation manifests", artifact.MaxImageEvidence)
		}
		seen[e.desc.Digest] = true
		found = append(found, e)
		return nil
	}
	for _, s := range subjects {
		s := ocispec.Descriptor{MediaType: s.MediaType, Digest: s.Digest, Size: s.Size}
		// cosign's tag scheme.
		if r, ok := src.(content.Resolver); ok {
			for _, t := range artifact.CosignTagSuffixes {
				tag := artifact.CosignTag(s.Digest, t.Suffix)
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
				e.tag, e.kind = tag, t.Kind
				if err := keep(e); err != nil {
					return nil, err
				}
			}
		}
		// OCI 1.1 referrers.
		refs, err := listReferrers(ctx, src, s)
		if err != nil {
			return nil, artifact.ListFailed("referrers of "+s.Digest.String(), err)
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
			if artifact.EvidenceKind(d.ArtifactType) == "" {
				continue
			}
			out = append(out, d)
			if len(out) > artifact.MaxImageEvidence {
				return errEnough
			}
		}
		return nil
	}
	switch s := src.(type) {
	case registry.ReferrerLister:
		err := artifact.ListReferrers(ctx, s, subject, "", add)
		switch {
		case errors.Is(err, errEnough):
			return nil, fmt.Errorf("more than %d signature and attestation referrers", artifact.MaxImageEvidence)
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
			data, err := artifact.FetchManifest(ctx, src, p)
			if err != nil {
				return nil, err
			}
			var m ocispec.Manifest
			if json.Unmarshal(data, &m) != nil || m.Subject == nil || m.Subject.Digest != subject.Digest {
				continue
			}
			p.ArtifactType = artifact.ManifestArtifactType(&m)
			cands = append(cands, p)
		}
		if err := add(cands); err != nil {
			return nil, fmt.Errorf("more than %d signature and attestation referrers", artifact.MaxImageEvidence)
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
	if !graph.IsManifest(desc.MediaType) {
		return e, fmt.Errorf("%s is a %q, not an image manifest", desc.Digest, desc.MediaType)
	}
	data, err := artifact.FetchManifest(ctx, src, desc)
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(data, &e.manifest); err != nil {
		return e, fmt.Errorf("%s: parse manifest: %w", desc.Digest, err)
	}
	e.data = data
	if err := artifact.CheckEvidenceShape(&e.manifest); err != nil {
		return e, fmt.Errorf("%s: %w", desc.Digest, err)
	}
	e.desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	if referrer {
		if e.manifest.Subject == nil || e.manifest.Subject.Digest != subject {
			return e, fmt.Errorf("%s is listed as a referrer of %s but does not name it as its subject", desc.Digest, subject)
		}
		e.artifactType = artifact.ManifestArtifactType(&e.manifest)
		e.kind = artifact.EvidenceKind(e.artifactType)
	}
	return e, nil
}

// imageEvidence adds the evidence src holds for an image (its original
// descriptor orig with bytes origData, stored as stored, with the platform
// manifests kept) to the package, and returns the root entries and the
// records for ferry.json.
func (b *builder) imageEvidence(ctx context.Context, src content.ReadOnlyStorage, component, ref string, orig ocispec.Descriptor, origData []byte, stored ocispec.Descriptor, kept []keptManifest) ([]ocispec.Descriptor, []artifact.ImageSignature, error) {
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
	var recs []artifact.ImageSignature
	signsOriginal := false
	for _, e := range found {
		m := e.manifest
		size := e.desc.Size
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			d := ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
			size += d.Size
			b.add(&artifact.Blob{Desc: d, Open: func(ctx context.Context) (io.ReadCloser, error) { return src.Fetch(ctx, d) }})
		}
		b.add(&artifact.Blob{Desc: e.desc, Data: e.data})
		entry := e.desc
		entry.ArtifactType = e.artifactType
		entry.Annotations = map[string]string{
			artifact.AnnotationKind: artifact.KindImageSignature, artifact.AnnotationComponent: component, artifact.AnnotationImageRef: ref,
			artifact.AnnotationSignatureSubject: e.subject.String(),
		}
		if e.tag != "" {
			entry.Annotations[artifact.AnnotationSignatureTag] = e.tag
		}
		entries = append(entries, entry)
		recs = append(recs, artifact.ImageSignature{Kind: e.kind, Subject: e.subject, Digest: e.desc.Digest, ArtifactType: e.artifactType, Tag: e.tag, Size: size})
		signsOriginal = signsOriginal || (e.subject == orig.Digest && stored.Digest != orig.Digest)
		b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: e.kind + " " + ref + " " + e.subject.String()})
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
	layer := ocispec.Descriptor{MediaType: artifact.MediaTypeSignedIndex, Digest: orig.Digest, Size: int64(len(origData)),
		Annotations: map[string]string{artifact.AnnotationSignedIndexMediaType: orig.MediaType}}
	b.add(&artifact.Blob{Desc: ocispec.Descriptor{MediaType: artifact.MediaTypeSignedIndex, Digest: orig.Digest, Size: layer.Size}, Data: origData})
	empty := b.addData(ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data)
	empty.Data = ocispec.DescriptorEmptyJSON.Data
	subject := ocispec.Descriptor{MediaType: stored.MediaType, Digest: stored.Digest, Size: stored.Size}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: artifact.ArtifactTypeSignedIndex,
		Config:       empty,
		Layers:       []ocispec.Descriptor{layer},
		Subject:      &subject,
	}
	md, _, err := b.addJSON(ocispec.MediaTypeImageManifest, m)
	if err != nil {
		return md, 0, err
	}
	md.ArtifactType = artifact.ArtifactTypeSignedIndex
	md.Annotations = map[string]string{
		artifact.AnnotationKind: artifact.KindImageSignature, artifact.AnnotationComponent: component, artifact.AnnotationImageRef: ref,
		artifact.AnnotationSignedIndex: orig.Digest.String(),
	}
	return md, md.Size + empty.Size + layer.Size, nil
}
