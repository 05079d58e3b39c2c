package artifact

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact/imagesig"
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
