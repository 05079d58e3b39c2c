package bom

import (
	"errors"
	"fmt"
	"strings"

	"github.com/package-url/packageurl-go"
)

// Bounds on a query.
const (
	// MaxQueryLen bounds a query's length in bytes.
	MaxQueryLen = 4 << 10
	// MaxQueryTerms bounds a query's version constraints.
	MaxQueryTerms = 64
)

// ErrQuery is the error ParseQuery returns (wrapped, with what is wrong)
// for a query it cannot read.
var ErrQuery = errors.New("bad query")

// Query selects components by package URL or name, and versions. Its
// zero value matches nothing; ParseQuery makes one.
//
// The language:
//
//	query      = ( purl | name ) [ "@" versions ]
//	purl       = "pkg:" type "/" [ namespace "/" ] name [ "?" qualifiers ]
//	versions   = "vers:" scheme "/" vers-constraints  (the purl-spec's vers)
//	           | alternative { "|" alternative }
//	alternative = constraint { "," constraint }      (all must hold)
//	constraint = [ "<" | "<=" | ">" | ">=" | "=" | "!=" ] version
//
// A purl query matches components whose package URL has its type,
// namespace and name (normalized as the purl-spec says per type: PyPI
// names per PEP 503, npm names and distributions lower-cased, Go module
// paths exact), and each qualifier it gives (others are ignored). A name
// query matches a component's name in any type (a PyPI component's also
// in its PEP 503 form). "*" in a name matches any run of characters. A
// version alone means "=". Versions compare in the component's
// ecosystem's order (Compare); a component whose version that order
// cannot read, or whose ecosystem has none, matches no range ("=" and
// "!=" then compare the strings).
//
// Examples: "pkg:golang/golang.org/x/net@<0.38.0",
// "pkg:deb/debian/openssl", "openssl", "lodash@4.17.20",
// "pkg:npm/lodash@>=4.0.0,<4.17.21|<3.10.0",
// "pkg:golang/golang.org/x/*", "pkg:npm/lodash@vers:npm/>=4.0.0|<4.17.21".
type Query struct {
	src        string
	purl       bool
	typ, ns    string
	name       string
	wild       bool
	qualifiers map[string]string
	// alts are alternatives, each a list of constraints that must all
	// hold; nil matches every version. vers is set for a vers range.
	alts [][]constraint
	vers []constraint
}

// constraint is one comparison with a version.
type constraint struct {
	op, version string
}

// ops are the comparators, longest first.
var ops = []string{"<=", ">=", "!=", "==", "<", ">", "="}

// ParseQuery parses s (see Query). Errors are one line, wrap ErrQuery and
// name what is wrong; a query longer than MaxQueryLen or with more than
// MaxQueryTerms constraints is refused.
func ParseQuery(s string) (Query, error) {
	q, err := parseQuery(s)
	if err != nil {
		return Query{}, fmt.Errorf("%w %.80q: %w", ErrQuery, s, err)
	}
	return q, nil
}

func parseQuery(s string) (Query, error) {
	if len(s) > MaxQueryLen {
		return Query{}, fmt.Errorf("longer than %d bytes", MaxQueryLen)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return Query{}, errors.New("empty")
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return Query{}, errors.New("a control character")
		}
	}
	q := Query{src: s}
	var versions string
	if strings.HasPrefix(strings.ToLower(s), "pkg:") {
		q.purl = true
		base, quals, _ := strings.Cut(s, "#") // a subpath is ignored
		base, quals, _ = strings.Cut(base, "?")
		if i := strings.Index(base, "@vers:"); i >= 0 {
			base, versions = base[:i], base[i+1:]
		} else if i := strings.LastIndex(base, "/"); i >= 0 {
			if j := strings.LastIndex(base[i:], "@"); j >= 0 {
				base, versions = base[:i+j], base[i+j+1:]
			}
		}
		if quals != "" {
			base += "?" + quals
		}
		p, err := packageurl.FromString(base)
		if err != nil {
			return Query{}, fmt.Errorf("package URL: %w", err)
		}
		if p.Name == "" {
			return Query{}, errors.New("package URL has no name")
		}
		q.typ, q.ns, q.name = p.Type, normalNamespace(p.Type, p.Namespace), normalName(p.Type, p.Name)
		if len(p.Qualifiers) > 0 {
			q.qualifiers = p.Qualifiers.Map()
		}
	} else {
		q.name = s
		if i := strings.LastIndex(s, "@"); i > 0 {
			q.name, versions = s[:i], s[i+1:]
		}
		if strings.ContainsAny(q.name, " \t") {
			return Query{}, errors.New("a name has no blanks")
		}
	}
	q.wild = strings.Contains(q.name, "*") || strings.Contains(q.ns, "*")
	if q.purl && q.ns == "" && q.wild {
		q.ns = "*" // pkg:golang/golang.org/* names no namespace apart
	}
	if versions != "" {
		if err := q.parseVersions(versions); err != nil {
			return Query{}, err
		}
	} else if strings.HasSuffix(s, "@") {
		return Query{}, errors.New(`no version after "@"`)
	}
	return q, nil
}

// parseVersions parses what follows "@".
func (q *Query) parseVersions(s string) error {
	if v, ok := strings.CutPrefix(s, "vers:"); ok {
		return q.parseVers(v)
	}
	n := 0
	for _, alt := range strings.Split(s, "|") {
		var cs []constraint
		for _, term := range strings.Split(alt, ",") {
			if n++; n > MaxQueryTerms {
				return fmt.Errorf("more than %d version constraints", MaxQueryTerms)
			}
			c, err := parseConstraint(term)
			if err != nil {
				return err
			}
			cs = append(cs, c)
		}
		q.alts = append(q.alts, cs)
	}
	return nil
}

// parseConstraint parses [op]version.
func parseConstraint(term string) (constraint, error) {
	term = strings.TrimSpace(term)
	c := constraint{op: "="}
	for _, op := range ops {
		if v, ok := strings.CutPrefix(term, op); ok {
			c.op, term = op, strings.TrimSpace(v)
			break
		}
	}
	if c.op == "==" {
		c.op = "="
	}
	if term == "" {
		return c, fmt.Errorf("constraint %q has no version", c.op)
	}
	if strings.ContainsAny(term, "<>=!@ ") {
		return c, fmt.Errorf("version %.40q is not one", term)
	}
	c.version = term
	return c, nil
}

// normalName is name as the purl-spec compares it for type typ.
func normalName(typ, name string) string {
	switch typ {
	case packageurl.TypePyPi:
		return PEP503(name)
	case packageurl.TypeNPM, packageurl.TypeGithub, packageurl.TypeBitbucket:
		return strings.ToLower(name)
	}
	return name
}

// PEP503 normalizes a Python package name (PEP 503): lower case, each run
// of "-", "_" and "." one "-".
func PEP503(name string) string {
	var b strings.Builder
	sep := false
	for _, r := range strings.ToLower(name) {
		if r == '-' || r == '_' || r == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('-')
		}
		sep = false
		b.WriteRune(r)
	}
	return b.String()
}

// String is the query as parsed: its package URL or name and its
// versions, e.g. "pkg:npm/lodash@>=4.0.0,<4.17.21|<3.10.0".
func (q Query) String() string {
	var b strings.Builder
	if q.purl {
		p := packageurl.PackageURL{Type: q.typ, Namespace: q.ns, Name: q.name}
		if p.Namespace == "*" {
			p.Namespace = ""
		}
		s := p.ToString()
		if q.wild {
			s = strings.ReplaceAll(s, "%2A", "*")
		}
		b.WriteString(s)
	} else {
		b.WriteString(q.name)
	}
	switch {
	case q.vers != nil:
		b.WriteString("@vers:" + q.typ + "/")
		for i, c := range q.vers {
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(c.String())
		}
	case q.alts != nil:
		b.WriteByte('@')
		for i, alt := range q.alts {
			if i > 0 {
				b.WriteByte('|')
			}
			for j, c := range alt {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(c.String())
			}
		}
	}
	if len(q.qualifiers) > 0 {
		p := packageurl.PackageURL{Type: "t", Name: "n", Qualifiers: packageurl.QualifiersFromMap(q.qualifiers)}
		_, quals, _ := strings.Cut(p.ToString(), "?")
		b.WriteString("?" + quals)
	}
	return b.String()
}

func (c constraint) String() string {
	if c.op == "=" {
		return c.version
	}
	return c.op + c.version
}

// Match reports whether c is a component q selects.
func (q Query) Match(c Component) bool {
	if q.src == "" {
		return false
	}
	return q.match(c, infoOf(c))
}

// match is Match with c's package URL read already.
func (q Query) match(c Component, in info) bool {
	if q.purl {
		if in.typ != q.typ || !in.purl {
			return false
		}
		if !q.nameMatch(in.ns, q.ns) || !q.nameMatch(in.name, q.name) {
			return false
		}
		for k, v := range q.qualifiers {
			if in.qualifiers[k] != v {
				return false
			}
		}
	} else if !q.nameMatch(c.Name, q.name) && !(in.typ == packageurl.TypePyPi && q.nameMatch(in.name, PEP503(q.name))) {
		return false
	}
	return q.versionMatch(c.Version, in.eco)
}

// nameMatch compares a name with a pattern of the query.
func (q Query) nameMatch(s, pattern string) bool {
	if !q.wild {
		return s == pattern
	}
	return glob(pattern, s)
}

// glob reports whether s matches pattern, where "*" matches any run of
// characters. Each literal part between stars is found at its leftmost
// place after the one before it (strings.Index), which decides a match
// for such patterns: time about linear in len(s) for any pattern, where
// backtracking to the last star took len(s)·len(pattern).
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
