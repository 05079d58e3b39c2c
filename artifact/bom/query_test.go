package bom_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// TestCompareDirection: Compare says -1 when a is older than b, in each
// ecosystem's own order.
func TestCompareDirection(t *testing.T) {
	for _, c := range []struct{ eco, a, b string }{
		{"Go", "0.37.0", "0.38.0"},
		{"Go", "v0.9.0", "v0.10.0"},
		{"Debian", "1.1.1n-0+deb11u5", "1.1.1w-0+deb11u1"},
		{"Debian", "1:1.0-1", "2:0.1-1"},
		{"npm", "4.0.0-beta.2", "4.0.0"},
		{"npm", "4.0.0-alpha.10", "4.0.0-beta.1"},
		{"PyPI", "2.0rc1", "2.0"},
		{"Alpine", "1.2.4-r2", "1.2.4-r10"},
		{"Maven", "2.14.1", "2.15.0"},
	} {
		if got, err := bom.Compare(c.eco, c.a, c.b); err != nil || got != -1 {
			t.Errorf("Compare(%s, %s, %s) = %d, %v; want -1", c.eco, c.a, c.b, got, err)
		}
		if got, err := bom.Compare(c.eco, c.b, c.a); err != nil || got != 1 {
			t.Errorf("Compare(%s, %s, %s) = %d, %v; want 1", c.eco, c.b, c.a, got, err)
		}
	}
}

var (
	xnet37   = bom.Component{Name: "golang.org/x/net", Version: "v0.37.0", Type: "golang", PURL: "pkg:golang/golang.org/x/net@v0.37.0"}
	xnet38   = bom.Component{Name: "golang.org/x/net", Version: "v0.38.0", Type: "golang", PURL: "pkg:golang/golang.org/x/net@v0.38.0"}
	xtext    = bom.Component{Name: "golang.org/x/text", Version: "v0.3.0", Type: "golang", PURL: "pkg:golang/golang.org/x/text@v0.3.0"}
	gomain   = bom.Component{Name: "example.com/app", Version: "UNKNOWN", Type: "golang", PURL: "pkg:golang/example.com/app"}
	stdlib   = bom.Component{Name: "stdlib", Version: "go1.22.1", Type: "golang", PURL: "pkg:golang/stdlib@1.22.1"}
	ssl11    = bom.Component{Name: "openssl", Version: "1.1.1n-0+deb11u5", Type: "deb", PURL: "pkg:deb/debian/openssl@1.1.1n-0+deb11u5?arch=amd64&distro=debian-11"}
	ssl11w   = bom.Component{Name: "openssl", Version: "1.1.1w-0+deb11u1", Type: "deb", PURL: "pkg:deb/debian/openssl@1.1.1w-0+deb11u1?arch=arm64&distro=debian-11"}
	sslApk   = bom.Component{Name: "openssl", Version: "3.1.4-r5", Type: "apk", PURL: "pkg:apk/alpine/openssl@3.1.4-r5?arch=x86_64"}
	lodash3  = bom.Component{Name: "lodash", Version: "3.9.0", Type: "npm", PURL: "pkg:npm/lodash@3.9.0"}
	lodash4  = bom.Component{Name: "lodash", Version: "4.17.20", Type: "npm", PURL: "pkg:npm/lodash@4.17.20"}
	lodash5  = bom.Component{Name: "lodash", Version: "4.17.21", Type: "npm", PURL: "pkg:npm/lodash@4.17.21"}
	lodashB  = bom.Component{Name: "lodash", Version: "4.0.0-beta.1", Type: "npm", PURL: "pkg:npm/lodash@4.0.0-beta.1"}
	angular  = bom.Component{Name: "@angular/core", Version: "17.0.0", Type: "npm", PURL: "pkg:npm/%40angular/core@17.0.0"}
	django   = bom.Component{Name: "Django_REST.framework", Version: "3.14.0", Type: "pypi", PURL: "pkg:pypi/django-rest-framework@3.14.0"}
	nopurl   = bom.Component{Name: "openssl", Version: "1.0", Type: "binary"}
	allComps = []bom.Component{xnet37, xnet38, xtext, gomain, stdlib, ssl11, ssl11w, sslApk, lodash3, lodash4, lodash5, lodashB, angular, django, nopurl}
)

// TestQueryMatch: each query selects exactly the components it names.
func TestQueryMatch(t *testing.T) {
	for _, c := range []struct {
		q    string
		want []bom.Component
	}{
		{"pkg:golang/golang.org/x/net@<0.38.0", []bom.Component{xnet37}},
		{"pkg:golang/golang.org/x/net@<=v0.38.0", []bom.Component{xnet37, xnet38}},
		{"pkg:golang/golang.org/x/net", []bom.Component{xnet37, xnet38}},
		{"pkg:golang/golang.org/x/*", []bom.Component{xnet37, xnet38, xtext}},
		{"pkg:golang/example.com/app@<1.0.0", nil}, // UNKNOWN is no version
		{"pkg:golang/stdlib@<1.22.2", []bom.Component{stdlib}},
		{"pkg:deb/debian/openssl", []bom.Component{ssl11, ssl11w}},
		{"pkg:deb/Debian/openssl@<1.1.1w-0+deb11u1", []bom.Component{ssl11}},
		{"pkg:deb/debian/openssl?arch=arm64", []bom.Component{ssl11w}},
		{"pkg:deb/debian/openssl@1.1.1n-0+deb11u5?distro=debian-11", []bom.Component{ssl11}},
		{"openssl", []bom.Component{ssl11, ssl11w, sslApk, nopurl}},
		{"openssl@1.0", []bom.Component{nopurl}},
		{"openssl@>=1.0", []bom.Component{ssl11, ssl11w, sslApk}}, // nopurl: no order
		{"openssl@!=3.1.4-r5", []bom.Component{ssl11, ssl11w, nopurl}},
		{"pkg:npm/lodash@>=4.0.0,<4.17.21|<3.10.0", []bom.Component{lodash3, lodash4}},
		{"pkg:npm/lodash@<4.0.0", []bom.Component{lodash3, lodashB}},
		{"pkg:npm/lodash@vers:npm/>=4.0.0|<4.17.21", []bom.Component{lodash4}},
		{"pkg:npm/lodash@vers:npm/<4.0.0|>=4.17.21", []bom.Component{lodash3, lodash5, lodashB}},
		{"pkg:npm/lodash@vers:npm/*", []bom.Component{lodash3, lodash4, lodash5, lodashB}},
		{"lodash@4.17.20", []bom.Component{lodash4}},
		{"pkg:npm/@angular/core@>=17", []bom.Component{angular}},
		{"pkg:npm/%40Angular/CORE", []bom.Component{angular}},
		{"@angular/core@17.0.0", []bom.Component{angular}},
		{"pkg:pypi/Django.Rest_Framework", []bom.Component{django}},
		{"django-rest-framework", []bom.Component{django}},
		{"lod*", []bom.Component{lodash3, lodash4, lodash5, lodashB}},
		{"*x/*", []bom.Component{xnet37, xnet38, xtext}},
		{"golang.org/x/net@0.37.0", []bom.Component{xnet37}},
	} {
		q, err := bom.ParseQuery(c.q)
		if err != nil {
			t.Errorf("%s: %v", c.q, err)
			continue
		}
		var got []bom.Component
		for _, comp := range allComps {
			if q.Match(comp) {
				got = append(got, comp)
			}
		}
		if names(got) != names(c.want) {
			t.Errorf("%s (%s): got %s, want %s", c.q, q, names(got), names(c.want))
		}
	}
	if (bom.Query{}).Match(xnet37) {
		t.Error("the zero Query matches")
	}
}

func names(cs []bom.Component) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Name+"@"+c.Version+"("+c.Type+")")
	}
	return strings.Join(s, " ")
}

// TestQueryString: String gives the query back, normalized.
func TestQueryString(t *testing.T) {
	for q, want := range map[string]string{
		"pkg:npm/lodash@>=4.0.0, <4.17.21 | <3.10.0": "pkg:npm/lodash@>=4.0.0,<4.17.21|<3.10.0",
		"pkg:deb/Debian/openssl?distro=debian-12":    "pkg:deb/debian/openssl?distro=debian-12",
		"openssl@==1.0":                            "openssl@1.0",
		"pkg:golang/golang.org/x/*":                "pkg:golang/golang.org/x/*",
		"pkg:npm/lodash@vers:npm/>=4.0.0|<4.17.21": "pkg:npm/lodash@vers:npm/>=4.0.0|<4.17.21",
	} {
		p, err := bom.ParseQuery(q)
		if err != nil || p.String() != want {
			t.Errorf("%q: %q, %v; want %q", q, p.String(), err, want)
		}
	}
}

// TestParseQueryRefuses: bad queries are one-line errors wrapping
// ErrQuery that say what is wrong.
func TestParseQueryRefuses(t *testing.T) {
	for q, want := range map[string]string{
		"":                                      "empty",
		strings.Repeat("a", 4097):               "longer than 4096 bytes",
		"x@" + strings.Repeat("<1,", 64) + "<2": "more than 64 version constraints",
		"pkg:npm/":                              "package URL",
		"pkg:npm/lodash@":                       `no version after "@"`,
		"lodash@<":                              `constraint "<" has no version`,
		"lodash@<1,":                            `constraint "=" has no version`,
		"lodash@<<1":                            "is not one",
		"lodash\n@1":                            "a control character",
		"pkg:npm/lodash@vers:golang/<1":         "vers scheme golang is not the package URL's type npm",
		"open ssl":                              "a name has no blanks",
	} {
		_, err := bom.ParseQuery(q)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, bom.ErrQuery) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%.30q: %v, want %q", q, err, want)
		}
	}
}

// TestSort: by type, name, then version in the ecosystem's order.
func TestSort(t *testing.T) {
	cs := []bom.Component{lodash5, ssl11w, xnet38, lodash4, ssl11, xnet37, nopurl, lodashB}
	bom.Sort(cs)
	want := []bom.Component{nopurl, ssl11, ssl11w, xnet37, xnet38, lodashB, lodash4, lodash5}
	if names(cs) != names(want) {
		t.Errorf("got  %s\nwant %s", names(cs), names(want))
	}
}
