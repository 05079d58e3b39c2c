package bom_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// key is what every format gives of a component of the package kind.
type key struct{ Name, Version, PURL string }

// packages are the components of cs that have a package URL but the image's
// own (pkg:oci), sorted.
func packages(cs []bom.Component) []key {
	var ks []key
	for _, c := range cs {
		if c.PURL != "" && c.Type != "oci" {
			ks = append(ks, key{c.Name, c.Version, c.PURL})
		}
	}
	slices.SortFunc(ks, func(a, b key) int { return strings.Compare(a.PURL, b.PURL) })
	return ks
}

// TestReadRealDocuments: the helper's SPDX and CycloneDX documents and
// Syft's JSON of the same images give the same packages, with their
// versions, package URLs, types and licenses.
func TestReadRealDocuments(t *testing.T) {
	docs := makeRealDocs(t)
	goMain := key{fixture.GoModule, "UNKNOWN", "pkg:golang/" + fixture.GoModule}
	want := [2][]string{
		{"pkg:deb/debian/ferry-tools@0.9.0-2?arch=amd64&distro=debian-12", "pkg:deb/debian/libferry1@1.2.3-1?arch=amd64&distro=debian-12", goMain.PURL},
		{"pkg:apk/alpine/busybox@1.36.1-r15?arch=x86_64&distro=alpine-3.19.1", "pkg:apk/alpine/musl@1.2.4-r2?arch=x86_64&distro=alpine-3.19.1", goMain.PURL},
	}
	for i, name := range []string{"debian", "alpine"} {
		var got [3][]bom.Component
		for j, f := range []struct {
			mt  string
			doc []byte
		}{{definition.ArtifactTypeSPDX, docs.SPDX[i]}, {definition.ArtifactTypeCycloneDX, docs.CycloneDX[i]}, {definition.ArtifactTypeSyft, docs.Syft[i]}} {
			cs, err := bom.Read(bytes.NewReader(f.doc), f.mt, bom.Limits{})
			if err != nil {
				t.Fatalf("%s %s: %v", name, f.mt, err)
			}
			got[j] = cs
			ks := packages(cs)
			var purls []string
			for _, k := range ks {
				purls = append(purls, k.PURL)
			}
			for _, w := range want[i] {
				if !slices.Contains(purls, w) {
					t.Errorf("%s %s: no %s in %v", name, f.mt, w, purls)
				}
			}
			if !slices.Contains(purls, "pkg:golang/stdlib@"+strings.TrimPrefix(goVersion(cs), "go")) {
				t.Errorf("%s %s: no Go standard library in %v", name, f.mt, purls)
			}
		}
		spdx, cdx, syft := packages(got[0]), packages(got[1]), packages(got[2])
		if !slices.Equal(spdx, cdx) || !slices.Equal(spdx, syft) {
			t.Errorf("%s: the formats differ:\nSPDX      %v\nCycloneDX %v\nSyft      %v", name, spdx, cdx, syft)
		}
		for j, cs := range got {
			for _, c := range cs {
				if c.Name == "musl" && (c.Type != "apk" || !slices.Equal(c.Licenses, []string{"MIT"})) {
					t.Errorf("format %d: musl is %+v", j, c)
				}
				if c.Name == "libferry1" && c.Type != "deb" {
					t.Errorf("format %d: libferry1 is %+v", j, c)
				}
			}
		}
		// The image itself: SPDX's root package, CycloneDX's subject.
		if !slices.ContainsFunc(got[0], func(c bom.Component) bool { return c.Type == "oci" && c.Name == "example.com/app" }) {
			t.Errorf("%s: SPDX names no image package", name)
		}
		if !slices.ContainsFunc(got[1], func(c bom.Component) bool { return c.Type == "container" && c.Name == "example.com/app" }) {
			t.Errorf("%s: CycloneDX names no image", name)
		}
		if slices.ContainsFunc(got[1], func(c bom.Component) bool { return c.Type == "file" }) {
			t.Errorf("%s: CycloneDX files read as components", name)
		}
	}
}

// goVersion is the version of the Go standard library cs lists.
func goVersion(cs []bom.Component) string {
	for _, c := range cs {
		if c.Name == "stdlib" {
			return c.Version
		}
	}
	return ""
}

// TestReadFormats: hand-written documents of each format, with what real
// documents vary in: nested CycloneDX components, license forms, Syft's
// older string licenses.
func TestReadFormats(t *testing.T) {
	for _, c := range []struct {
		name, mt, doc string
		want          []bom.Component
	}{
		{"spdx", definition.ArtifactTypeSPDX, `{"spdxVersion":"SPDX-2.3","files":[{"fileName":"/x","checksums":[{"a":[1,2,{"b":null}]}]}],
			"packages":[{"name":"openssl","versionInfo":"3.0.11-1~deb12u2","licenseDeclared":"Apache-2.0","licenseConcluded":"Apache-2.0",
			"externalRefs":[{"referenceCategory":"SECURITY","referenceType":"cpe23Type","referenceLocator":"cpe:2.3:a:openssl"},
			{"referenceCategory":"PACKAGE-MANAGER","referenceType":"purl","referenceLocator":"pkg:deb/debian/openssl@3.0.11-1~deb12u2"}]},
			{"name":"img","primaryPackagePurpose":"CONTAINER","licenseDeclared":"NOASSERTION"}]}`,
			[]bom.Component{{Name: "openssl", Version: "3.0.11-1~deb12u2", Type: "deb", PURL: "pkg:deb/debian/openssl@3.0.11-1~deb12u2", Licenses: []string{"Apache-2.0"}},
				{Name: "img", Type: "container"}}},
		{"cyclonedx", definition.ArtifactTypeCycloneDX, `{"bomFormat":"CycloneDX","specVersion":"1.6","metadata":{"timestamp":"x","component":{"type":"container","name":"app","version":"1"}},
			"components":[{"type":"library","name":"lodash","version":"4.17.20","purl":"pkg:npm/lodash@4.17.20","licenses":[{"license":{"id":"MIT"}},{"expression":"MIT OR Apache-2.0"}],
			"components":[{"type":"library","name":"core","group":"@angular","version":"17.0.0","purl":"pkg:npm/%40angular/core@17.0.0","licenses":[{"license":{"name":"custom"}}]}]},
			{"type":"file","name":"/etc/passwd"},{"type":"library","group":"org.example","name":"lib","version":"1.0"}]}`,
			[]bom.Component{{Name: "app", Version: "1", Type: "container"},
				{Name: "lodash", Version: "4.17.20", Type: "npm", PURL: "pkg:npm/lodash@4.17.20", Licenses: []string{"MIT", "MIT OR Apache-2.0"}},
				{Name: "core", Version: "17.0.0", Type: "npm", PURL: "pkg:npm/%40angular/core@17.0.0", Licenses: []string{"custom"}},
				{Name: "org.example/lib", Version: "1.0", Type: "library"}}},
		{"syft", definition.ArtifactTypeSyft, `{"artifacts":[{"name":"requests","version":"2.31.0","type":"python","purl":"pkg:pypi/requests@2.31.0","licenses":["Apache-2.0"]},
			{"name":"x","version":"1","type":"binary","licenses":[{"value":"GPL","spdxExpression":""},null]}],"source":{"type":"image"},"schema":{"version":"16.0.34"}}`,
			[]bom.Component{{Name: "requests", Version: "2.31.0", Type: "pypi", PURL: "pkg:pypi/requests@2.31.0", Licenses: []string{"Apache-2.0"}},
				{Name: "x", Version: "1", Type: "binary", Licenses: []string{"GPL"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := bom.Read(strings.NewReader(c.doc), c.mt, bom.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestReadRefuses: malformed documents and documents of another format or
// kind are one-line errors wrapping ErrFormat, which name what is wrong
// in at most 512 bytes.
func TestReadRefuses(t *testing.T) {
	spdx, cdx := definition.ArtifactTypeSPDX, definition.ArtifactTypeCycloneDX
	for _, c := range []struct {
		name, mt, doc, want string
	}{
		{"media type", "application/json", `{}`, `SBOM media type "application/json" is not`},
		{"long media type", strings.Repeat("a", 1<<20), `{}`, `SBOM media type "aaaa`},
		{"empty", spdx, ``, "SPDX document: the document ends early"},
		{"truncated", spdx, `{"packages":[{"name":"a"}`, "SPDX document: the document ends early"},
		{"not an object", spdx, `[1,2]`, "SPDX document: want an object, found an array"},
		{"packages an object", spdx, `{"packages":{}}`, "SPDX document: want packages as an array, found an object"},
		{"wrong type", spdx, `{"packages":[{"name":"a"},{"name":5}]}`, "SPDX document: package 1: name is a number, not string"},
		{"spdx 3", spdx, `{"spdxVersion":"SPDX-3.0","packages":[]}`, `SPDX document: version "SPDX-3.0" is not SPDX 2.x`},
		{"not cyclonedx", cdx, `{"bomFormat":"SPDX"}`, `CycloneDX document: bomFormat "SPDX" is not CycloneDX`},
		{"garbage", cdx, `{"components":[}`, "CycloneDX document: invalid character '}'"},
		{"trailing", cdx, `{} {}`, "CycloneDX document: data after the document"},
		{"deep skip", cdx, `{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, "nested more than 256 levels deep"},
		{"deep component", cdx, `{"components":[` + strings.Repeat(`{"components":[`, 20000) + strings.Repeat("]}", 20000) + `]}`, "exceeded max depth"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := bom.Read(strings.NewReader(c.doc), c.mt, bom.Limits{})
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 512 || !errors.Is(err, bom.ErrFormat) {
				t.Errorf("got %.200v, want %q in at most 512 bytes", err, c.want)
			}
		})
	}
}
