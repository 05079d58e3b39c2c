package bom

import (
	"fmt"
	"strings"

	"github.com/google/osv-scalibr/semantic"
	"github.com/package-url/packageurl-go"
)

// ecosystems maps package URL types to OSV's ecosystem names
// (https://ossf.github.io/osv-schema/#defined-ecosystems).
var ecosystems = map[string]string{
	packageurl.TypeGolang:   "Go",
	packageurl.TypeNPM:      "npm",
	packageurl.TypePyPi:     "PyPI",
	packageurl.TypeMaven:    "Maven",
	packageurl.TypeCargo:    "crates.io",
	packageurl.TypeGem:      "RubyGems",
	packageurl.TypeNuget:    "NuGet",
	packageurl.TypeComposer: "Packagist",
	packageurl.TypeHex:      "Hex",
	"pub":                   "Pub",
	"cran":                  "CRAN",
	"hackage":               "Hackage",
	"swift":                 "SwiftURL",
}

// distros maps a deb, rpm or apk package URL's namespace to its OSV ecosystem.
var distros = map[string]string{
	"debian":      "Debian",
	"ubuntu":      "Ubuntu",
	"alpine":      "Alpine",
	"wolfi":       "Wolfi",
	"chainguard":  "Chainguard",
	"almalinux":   "AlmaLinux",
	"rocky-linux": "Rocky Linux",
	"redhat":      "Red Hat",
	"opensuse":    "openSUSE",
	"suse":        "SUSE",
}

// Ecosystem is the OSV ecosystem of c ("Go", "npm", "Debian", …), read
// from its package URL; "" when it has none or its type has no ecosystem.
// A distribution's release is not part of it: Release gives that.
func Ecosystem(c Component) string {
	p, err := packageurl.FromString(c.PURL)
	if err != nil {
		return ""
	}
	return ecosystemOf(p)
}

// ecosystemOf is the OSV ecosystem of a package URL, "" if none.
func ecosystemOf(p packageurl.PackageURL) string {
	switch p.Type {
	case packageurl.TypeDebian, packageurl.TypeRPM, packageurl.TypeApk:
		return distros[strings.ToLower(p.Namespace)]
	}
	return ecosystems[p.Type]
}

// MaxVersionLen bounds a version's length in bytes: 128, above any real
// one (a Go pseudo-version is 34 bytes, an npm or PyPI version with a
// commit hash in its build part about 70). osv-scalibr's parsers take
// time quadratic in a version's length (64 KiB: seconds per parse), so a
// longer string is never parsed.
const MaxVersionLen = 128

// Compare compares versions a and b of ecosystem (an OSV ecosystem name,
// with or without a release suffix such as "Debian:12") in that
// ecosystem's order: -1, 0 or +1. An error says that the ecosystem has no
// known order, that a is not a version of it, or that a or b is longer
// than MaxVersionLen.
func Compare(ecosystem, a, b string) (int, error) {
	for _, v := range [...]string{a, b} {
		if len(v) > MaxVersionLen {
			return 0, fmt.Errorf("version %.40q… of %s: longer than %d bytes", v, ecosystem, MaxVersionLen)
		}
	}
	v, err := semantic.Parse(a, ecosystem)
	if err != nil {
		return 0, fmt.Errorf("version %q of %s: %w", a, ecosystem, err)
	}
	return v.CompareStr(b)
}
