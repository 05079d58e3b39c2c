package bom

import (
	"slices"
	"strings"

	"github.com/package-url/packageurl-go"
)

// info is what matching needs of a component's package URL.
type info struct {
	purl          bool
	typ, ns, name string
	qualifiers    map[string]string
	eco           string
}

// infoOf reads c's package URL; without one (or with a malformed one) only
// its type is known.
func infoOf(c Component) info {
	if c.PURL == "" {
		return info{typ: c.Type}
	}
	p, err := packageurl.FromString(c.PURL)
	if err != nil {
		return info{typ: c.Type}
	}
	in := info{purl: true, typ: p.Type, ns: normalNamespace(p.Type, p.Namespace), name: normalName(p.Type, p.Name), eco: ecosystemOf(p)}
	if len(p.Qualifiers) > 0 {
		in.qualifiers = p.Qualifiers.Map()
	}
	return in
}

// key is the (type, namespace, name) of a component with a package URL,
// as the index looks it up.
func (in info) key() string {
	return in.typ + "/" + in.ns + "/" + in.name
}

// normalNamespace is a namespace as the purl-spec compares it for type typ.
func normalNamespace(typ, ns string) string {
	switch typ {
	case packageurl.TypeNPM, packageurl.TypeGithub, packageurl.TypeBitbucket, packageurl.TypeDebian,
		packageurl.TypeApk, packageurl.TypeRPM, packageurl.TypeAlpm:
		return strings.ToLower(ns)
	}
	return ns
}

// versionMatch reports whether version v of ecosystem eco is one q's
// versions select.
func (q Query) versionMatch(v, eco string) bool {
	if q.vers != nil {
		return versMatch(q.vers, v, eco)
	}
	if q.alts == nil {
		return true
	}
	for _, alt := range q.alts {
		all := true
		for _, c := range alt {
			if !c.holds(v, eco) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// holds reports whether version v of ecosystem eco satisfies c.
func (c constraint) holds(v, eco string) bool {
	cmp, ok := compareVersions(eco, v, c.version)
	if !ok {
		switch c.op {
		case "=":
			return v == c.version
		case "!=":
			return v != c.version
		}
		return false
	}
	switch c.op {
	case "<":
		return cmp < 0
	case "<=":
		return cmp <= 0
	case ">":
		return cmp > 0
	case ">=":
		return cmp >= 0
	case "!=":
		return cmp != 0
	}
	return cmp == 0
}

// compareVersions compares a with b in eco's order; false when eco has
// none or a is not a version of it.
func compareVersions(eco, a, b string) (int, bool) {
	if eco == "" {
		return 0, false
	}
	if eco == "Go" {
		a, b = goVersion(a), goVersion(b)
	}
	if !Plausible(a) || !Plausible(b) {
		return 0, false
	}
	cmp, err := Compare(eco, a, b)
	return cmp, err == nil
}

// goVersion drops the "go" of a Go release ("go1.22.1", the standard
// library's version in SBOMs).
func goVersion(v string) string {
	if rest, ok := strings.CutPrefix(v, "go"); ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
		return rest
	}
	return v
}

// Plausible reports whether v can be a version: at most MaxVersionLen
// bytes, and after an optional "v" it starts with a digit. osv-scalibr's
// orders take any string (UNKNOWN, (devel)) as some version; such a
// component must match no range.
func Plausible(v string) bool {
	if len(v) > MaxVersionLen {
		return false
	}
	v = strings.TrimPrefix(strings.TrimPrefix(v, "v"), "V")
	return v != "" && v[0] >= '0' && v[0] <= '9'
}

// parseVers parses a purl-spec version range's body (after "vers:"):
// scheme "/" constraints separated by "|", or "*" for every version.
func (q *Query) parseVers(s string) error {
	scheme, body, ok := strings.Cut(s, "/")
	if !ok || scheme == "" {
		return errTerm("vers range has no scheme")
	}
	if q.purl && !strings.EqualFold(scheme, q.typ) {
		return errTerm("vers scheme " + scheme + " is not the package URL's type " + q.typ)
	}
	body = strings.TrimSpace(body)
	if body == "*" {
		return nil
	}
	terms := strings.Split(body, "|")
	if len(terms) > MaxQueryTerms {
		return errTerm("more than 64 version constraints")
	}
	q.vers = make([]constraint, 0, len(terms))
	for _, t := range terms {
		c, err := parseConstraint(t)
		if err != nil {
			return err
		}
		q.vers = append(q.vers, c)
	}
	return nil
}

type errTerm string

func (e errTerm) Error() string { return string(e) }

// versMatch applies the purl-spec's vers algorithm: the constraints,
// sorted by version in eco's order, read as contiguous intervals.
func versMatch(cs []constraint, v, eco string) bool {
	for _, c := range cs {
		if _, ok := compareVersions(eco, c.version, c.version); !ok {
			return false
		}
	}
	if _, ok := compareVersions(eco, v, v); !ok {
		return false
	}
	var rest []constraint
	for _, c := range cs {
		cmp, _ := compareVersions(eco, v, c.version)
		switch {
		case c.op == "=" && cmp == 0:
			return true
		case c.op == "!=" && cmp == 0:
			return false
		case c.op != "=" && c.op != "!=":
			rest = append(rest, c)
		}
	}
	if len(rest) == 0 {
		// Only = and != constraints: a != list matches what it leaves out.
		return slices.ContainsFunc(cs, func(c constraint) bool { return c.op == "!=" })
	}
	slices.SortStableFunc(rest, func(a, b constraint) int {
		cmp, _ := compareVersions(eco, a.version, b.version)
		return cmp
	})
	if len(rest) == 1 {
		return rest[0].holds(v, eco)
	}
	lower := func(c constraint) bool { return c.op == ">" || c.op == ">=" }
	for i := 0; i+1 < len(rest); i++ {
		cur, next := rest[i], rest[i+1]
		if i == 0 && !lower(cur) && cur.holds(v, eco) {
			return true
		}
		if i+2 == len(rest) && lower(next) && next.holds(v, eco) {
			return true
		}
		if lower(cur) && !lower(next) && cur.holds(v, eco) && next.holds(v, eco) {
			return true
		}
	}
	return false
}
