// Package bom reads the components of SBOM documents (SPDX, CycloneDX and
// Syft JSON), matches them against queries over package URLs and version
// ranges, and keeps an index of many documents. Versions compare in each
// ecosystem's own order (osv-scalibr's semantic package), never by a
// hand-written rule.
package bom

// Component is one software package an SBOM lists.
type Component struct {
	// Name is the package's name as its ecosystem spells it (for a Go
	// module its path, for Maven group:artifact).
	Name string `json:"name"`
	// Version is the installed version, as the SBOM records it.
	Version string `json:"version,omitempty"`
	// Type is the package URL's type (golang, deb, apk, npm, pypi, maven,
	// …), or the document's own kind when it gives no package URL.
	Type string `json:"type,omitempty"`
	// PURL is the package URL (https://github.com/package-url/purl-spec).
	PURL string `json:"purl,omitempty"`
	// Licenses are SPDX license expressions or names.
	Licenses []string `json:"licenses,omitempty"`
}
