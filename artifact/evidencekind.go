package artifact

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
)

// EvidenceKind is the imagesig kind of evidence of artifactType t, or "".
func EvidenceKind(t string) string {
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

// CosignTagSuffixes are cosign's tag-scheme suffixes and the kind each holds.
var CosignTagSuffixes = []struct{ Suffix, Kind string }{
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
	for _, t := range CosignTagSuffixes {
		if strings.HasSuffix(tag, t.Suffix) {
			return t.Kind
		}
	}
	return ""
}

// ManifestArtifactType is m's artifactType, else its config's media type.
func ManifestArtifactType(m *ocispec.Manifest) string {
	if m.ArtifactType != "" {
		return m.ArtifactType
	}
	return m.Config.MediaType
}

// CheckEvidenceShape bounds an evidence manifest's blobs.
func CheckEvidenceShape(m *ocispec.Manifest) error {
	if len(m.Layers) > MaxEvidenceLayers {
		return fmt.Errorf("%d layers, more than the %d a signature manifest may have", len(m.Layers), MaxEvidenceLayers)
	}
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := graph.CheckDescriptor(d); err != nil {
			return err
		}
		if graph.IsContainer(d.MediaType) {
			return fmt.Errorf("%s: a signature manifest's blob may not be a %.64q", d.Digest, d.MediaType)
		}
		if d.Size > MaxEvidenceBlobSize {
			return fmt.Errorf("blob %s is %d bytes, more than the %d a signature's may be", d.Digest, d.Size, MaxEvidenceBlobSize)
		}
	}
	return nil
}
