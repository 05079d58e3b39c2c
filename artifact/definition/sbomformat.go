package definition

import "fmt"

// The media types of SBOM documents.
const (
	// ArtifactTypeSPDX, ArtifactTypeCycloneDX and ArtifactTypeSyft are the
	// artifactTypes of SBOM referrer manifests and the media types of their
	// one layer (Syft's own JSON is what Zarf packages carry).
	ArtifactTypeSPDX      = "application/spdx+json"
	ArtifactTypeCycloneDX = "application/vnd.cyclonedx+json"
	ArtifactTypeSyft      = "application/vnd.syft+json"
)

// SBOMFormat is the document format of an SBOM.
type SBOMFormat string

// SBOM formats. SBOMFormatSPDX is the default. SBOMFormatSyft (Syft's
// own JSON, as Zarf packages carry it) is read and carried, never made:
// ParseSBOMFormat, which names the formats create can make, refuses it,
// and only an SBOMFormatGenerator gives documents of it.
const (
	SBOMFormatSPDX      SBOMFormat = "spdx-json"
	SBOMFormatCycloneDX SBOMFormat = "cyclonedx-json"
	SBOMFormatSyft      SBOMFormat = "syft-json"
)

// SBOMFormats are the formats a package may hold, in the order tools list them.
var SBOMFormats = []SBOMFormat{SBOMFormatSPDX, SBOMFormatCycloneDX, SBOMFormatSyft}

// ParseSBOMFormat parses the name of a format create makes
// (SBOMFormatSPDX or SBOMFormatCycloneDX); "" is SBOMFormatSPDX.
func ParseSBOMFormat(s string) (SBOMFormat, error) {
	switch f := SBOMFormat(s); f {
	case "":
		return SBOMFormatSPDX, nil
	case SBOMFormatSPDX, SBOMFormatCycloneDX:
		return f, nil
	}
	return "", fmt.Errorf("unknown SBOM format %.64q: want %s or %s", s, SBOMFormatSPDX, SBOMFormatCycloneDX)
}

// ArtifactType is the media type of f's documents, which is also the
// artifactType of the referrer manifest holding one.
func (f SBOMFormat) ArtifactType() string {
	switch f {
	case SBOMFormatCycloneDX:
		return ArtifactTypeCycloneDX
	case SBOMFormatSyft:
		return ArtifactTypeSyft
	}
	return ArtifactTypeSPDX
}

// FileName is the title given to the layer holding a document of format f.
func (f SBOMFormat) FileName() string {
	switch f {
	case SBOMFormatCycloneDX:
		return "sbom.cdx.json"
	case SBOMFormatSyft:
		return "sbom.syft.json"
	}
	return "sbom.spdx.json"
}
