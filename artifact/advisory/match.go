package advisory

import (
	"slices"
	"strings"

	"github.com/google/osv-scalibr/semantic"
	"github.com/package-url/packageurl-go"
	"golang.org/x/mod/semver"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// Match is an advisory that names a component at its installed version.
type Match struct {
	// ID is the advisory's id (GO-2021-0113, GHSA-…, CVE-…, DSA-…).
	ID string `json:"id"`
	// Aliases are the advisory's other ids (CVEs, GHSAs).
	Aliases []string `json:"aliases,omitempty"`
	// Summary is its one-line summary.
	Summary string `json:"summary,omitempty"`
	// Ecosystem is the ecosystem of the affected entry that matched, as
	// the advisory spells it ("Go", "Debian:12", "Alpine:v3.20").
	Ecosystem string `json:"ecosystem"`
	// Package is the package name the advisory gives.
	Package string `json:"package"`
	// Installed is the component's version.
	Installed string `json:"installed"`
	// Fixed is the smallest fixed version above Installed; "" when the
	// advisory names none.
	Fixed string `json:"fixed,omitempty"`
	// Severity is a CVSS vector, or the database's own severity word
	// ("HIGH"), when the advisory gives one.
	Severity string `json:"severity,omitempty"`
}

// Match returns the advisories that affect c at its version, by id. The
// ecosystem is bom.Ecosystem(c); the name is the package URL's (for a
// distribution's package also its source package, the purl's `upstream`
// qualifier, which the distribution's advisories name); with a `distro`
// qualifier (debian-12, alpine-3.20.1, ubuntu-22.04) only the advisories
// of that release, and those naming no release, apply. Versions compare
// in the ecosystem's order; a version it cannot parse matches nothing.
// GIT ranges are not evaluated.
func (db *DB) Match(c bom.Component) []Match {
	q, ok := query(c)
	if !ok {
		return nil
	}
	var out []Match
	for _, n := range q.names {
		installed, err := semantic.Parse(n.version, q.ecosystem)
		if err != nil {
			continue
		}
		for _, e := range db.index[key(q.ecosystem, n.name)] {
			if q.release != "" && e.release != "" && e.release != q.release && !strings.HasPrefix(e.release, q.release+":") {
				continue
			}
			hit, fix := affects(installed, q.ecosystem, n.version, e)
			if !hit {
				continue
			}
			r := db.records[e.rec]
			if i := slices.IndexFunc(out, func(m Match) bool { return m.ID == r.id }); i >= 0 {
				if fix != "" && (out[i].Fixed == "" || lessVersion(q.ecosystem, fix, out[i].Fixed)) {
					out[i].Fixed = fix
				}
				continue
			}
			out = append(out, Match{ID: r.id, Aliases: r.aliases, Summary: r.summary, Ecosystem: e.ecosystem,
				Package: n.name, Installed: c.Version, Fixed: fix, Severity: r.severity})
		}
	}
	slices.SortFunc(out, func(a, b Match) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// compQuery is what Match looks up for a component: each name it goes by
// with the version to compare under that name.
type compQuery struct {
	ecosystem, release string
	names              []nameVersion
}

type nameVersion struct{ name, version string }

// query reads c's ecosystem, names, release and version from its purl. A
// distribution's binary package also goes by its source package (the
// `upstream` qualifier, "src" or "src@version"), whose version, when the
// qualifier gives one, is the one the distribution's advisories speak of.
func query(c bom.Component) (compQuery, bool) {
	q := compQuery{ecosystem: bom.Ecosystem(c)}
	if q.ecosystem == "" {
		return q, false
	}
	p, err := packageurl.FromString(c.PURL)
	if err != nil {
		return q, false
	}
	version := c.Version
	if version == "" {
		version = p.Version
	}
	quals := p.Qualifiers.Map()
	name := p.Name
	switch q.ecosystem {
	case "Maven":
		name = p.Namespace + ":" + p.Name
	case "Debian", "Ubuntu", "Alpine", "Wolfi", "Chainguard", "AlmaLinux", "Rocky Linux", "Red Hat", "openSUSE", "SUSE":
		q.release = release(q.ecosystem, quals["distro"])
	default:
		if p.Namespace != "" {
			name = p.Namespace + "/" + p.Name
		}
	}
	if q.ecosystem == "Go" && (name == "stdlib" || name == "toolchain") {
		version = strings.TrimPrefix(version, "go")
	}
	if plausible(q.ecosystem, version) {
		q.names = append(q.names, nameVersion{name, version})
	}
	if up, upVersion, _ := strings.Cut(quals["upstream"], "@"); up != "" && up != name {
		if upVersion == "" {
			upVersion = version
		}
		if plausible(q.ecosystem, upVersion) {
			q.names = append(q.names, nameVersion{up, upVersion})
		}
	}
	return q, len(q.names) > 0
}

// plausible reports whether v can be a version of ecosystem.
func plausible(ecosystem, v string) bool {
	if !bom.Plausible(v) {
		return false
	}
	// semantic reads any string as a semantic version; Go's are stricter.
	return ecosystem != "Go" || semver.IsValid("v"+strings.TrimPrefix(v, "v"))
}

// release is the OSV release suffix ("12", "v3.20", "22.04") of a purl's
// distro qualifier (debian-12, alpine-3.20.1, ubuntu-22.04); "" when it
// has none or names another distribution.
func release(ecosystem, distro string) string {
	id, ver, ok := strings.Cut(distro, "-")
	if !ok || !strings.EqualFold(id, ecosystem) || ver == "" {
		return ""
	}
	switch ecosystem {
	case "Debian":
		major, _, _ := strings.Cut(ver, ".")
		return major
	case "Alpine":
		parts := strings.SplitN(ver, ".", 3)
		if len(parts) < 2 {
			return ""
		}
		return "v" + parts[0] + "." + parts[1]
	case "Ubuntu":
		return ver
	}
	return ""
}

// affects evaluates e for the installed version v (spelled s) per the
// OSV schema's algorithm: listed versions exactly; in each range, the
// greatest event at or below v decides (introduced: affected; fixed:
// not; last_affected: not past it), and nothing at or past a limit is
// affected. fix is the smallest fixed version above v of the ranges that
// affect it.
func affects(v semantic.Version, ecosystem, s string, e entry) (hit bool, fix string) {
	_, hit = slices.BinarySearch(e.versions, s)
	for _, r := range e.ranges {
		in, f := inRange(v, r)
		if !in {
			continue
		}
		if !hit || (f != "" && (fix == "" || lessVersion(ecosystem, f, fix))) {
			fix = f
		}
		hit = true
	}
	return hit, fix
}

// inRange reports whether v is in r, and r's smallest fixed version above v.
func inRange(v semantic.Version, r vrange) (bool, string) {
	var (
		decider    semantic.Version
		decideKind uint8
		found      bool
		fix        semantic.Version
		fixStr     string
	)
	for _, ev := range r.events {
		if ev.v == nil { // introduced "0"
			if !found {
				decideKind, found = introduced, true
			}
			continue
		}
		ew := ev.v
		c, err := v.Compare(ew) // sign of v - ev
		if err != nil {
			continue
		}
		switch ev.kind {
		case limit:
			if c >= 0 {
				return false, ""
			}
			continue
		case fixed:
			if c < 0 && (fix == nil || cmp(ew, fix) < 0) {
				fix, fixStr = ew, ev.version
			}
		}
		applies := c >= 0
		if ev.kind == lastAffected {
			applies = c > 0
		}
		if !applies {
			continue
		}
		// The greatest applicable event decides ("0" is below every
		// other); at a tie, the one that ends the range wins.
		if !found || decider == nil || cmp(ew, decider) > 0 || (cmp(ew, decider) == 0 && ev.kind != introduced) {
			decider, decideKind, found = ew, ev.kind, true
		}
	}
	if !found || decideKind != introduced {
		return false, ""
	}
	return true, fixStr
}

// cmp compares two versions of one ecosystem; 0 when they cannot be.
func cmp(a, b semantic.Version) int {
	c, err := a.Compare(b)
	if err != nil {
		return 0
	}
	return c
}

// lessVersion reports a < b in ecosystem's order.
func lessVersion(ecosystem, a, b string) bool {
	c, err := bom.Compare(ecosystem, a, b)
	return err == nil && c < 0
}
