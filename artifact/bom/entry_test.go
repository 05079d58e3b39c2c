package bom_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestReadEntryBombs: one entry of a document holding millions of small
// values (nested components, licenses, external references) costs memory
// for what Read keeps, not for what the entry lists. Before, Read decoded
// each entry whole: a 57 MiB CycloneDX component nesting 2·10^7 empty
// ones peaked at 6.6 GiB (19 s) before the component limit was checked;
// 2·10^7 empty licenses or external references at 1–1.9 GiB.
func TestReadEntryBombs(t *testing.T) {
	if testing.Short() {
		t.Skip("reads documents of 57 MiB")
	}
	const n = 20_000_000
	cdx, spdx, syft := definition.ArtifactTypeCycloneDX, definition.ArtifactTypeSPDX, definition.ArtifactTypeSyft
	for _, c := range []struct {
		name, mt, doc, wantErr string
	}{
		{"nested components", cdx, `{"bomFormat":"CycloneDX","components":[{"name":"a","components":[` + strings.Repeat(`{},`, n) + `{}]}]}`, "SBOM has more than 200000 components"},
		{"nested files", cdx, `{"bomFormat":"CycloneDX","components":[{"name":"a","components":[` + strings.Repeat(`{"type":"file"},`, n/6) + `{}]}]}`, ""},
		{"cyclonedx licenses", cdx, `{"bomFormat":"CycloneDX","components":[{"name":"a","licenses":[` + strings.Repeat(`{},`, n) + `{}]}]}`, ""},
		{"spdx external references", spdx, `{"spdxVersion":"SPDX-2.3","packages":[{"name":"a","externalRefs":[` + strings.Repeat(`{},`, n) + `{}]}]}`, ""},
		{"syft licenses", syft, `{"artifacts":[{"name":"a","licenses":[` + strings.Repeat(`"",`, n) + `""]}]}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			start := time.Now()
			mem := allocated(func() { _, err = bom.Read(strings.NewReader(c.doc), c.mt, bom.Limits{}) })
			t.Logf("%d MiB: %d MiB, %v", len(c.doc)>>20, mem>>20, time.Since(start).Round(time.Millisecond))
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("err = %v, want %q", err, c.wantErr)
			}
			// The decoder's buffer and the entry's bytes, each held once,
			// and what the walk's tokens leave for the collector.
			if mem > 8*uint64(len(c.doc)) {
				t.Errorf("%d MiB allocated for a document of %d MiB", mem>>20, len(c.doc)>>20)
			}
		})
	}
}

// TestReadErrorsShort: a refusal is one short line, whatever the document
// holds where it goes wrong (before: a 60 MiB number was quoted whole).
func TestReadErrorsShort(t *testing.T) {
	for _, doc := range []string{
		`{"spdxVersion":"SPDX-2.3","x":1` + strings.Repeat("0", 1<<20) + `,"packages":[]}`,
		`{"spdxVersion":"SPDX-2.3","packages":[{"name":1` + strings.Repeat("0", 1<<20) + `}]}`,
		`{"spdxVersion":"SPDX-2.3","packages":[{"name":"` + strings.Repeat("\\u001b[31m", 1<<16) + `` + "\x01" + `"}]}`,
	} {
		_, err := bom.Read(strings.NewReader(doc), definition.ArtifactTypeSPDX, bom.Limits{})
		if err != nil && (len(err.Error()) > 300 || strings.ContainsAny(err.Error(), "\n\x1b") || !errors.Is(err, bom.ErrFormat)) {
			t.Errorf("error of %d bytes: %.300q", len(err.Error()), err)
		}
	}
}

// TestReadNestedFiles: a file's nested components are kept, in document
// order, whichever of its fields comes first.
func TestReadNestedFiles(t *testing.T) {
	doc := `{"bomFormat":"CycloneDX","components":[{"components":[{"name":"b","components":[{"type":"file","components":[{"name":"d"}],"name":"/f"}]},{"type":"file","name":"/g"}],"name":"a","type":"library"},
		{"components":[{"components":[{"name":"e"}],"type":"file"}],"type":"file"},{"name":"h"}]}`
	cs, err := bom.Read(strings.NewReader(doc), definition.ArtifactTypeCycloneDX, bom.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		got = append(got, c.Name)
	}
	if strings.Join(got, " ") != "a b d e h" {
		t.Errorf("got %v, want a b d e h", got)
	}
}

// TestReadWalkedEntries: an entry over 64 KiB, walked token by token,
// gives what the same entry decoded whole gives.
func TestReadWalkedEntries(t *testing.T) {
	pad := `"pad":{"x":["` + strings.Repeat("p", 70<<10) + `",1,null,{"y":[]}]},`
	for _, c := range []struct{ mt, doc string }{
		{definition.ArtifactTypeSPDX, `{"spdxVersion":"SPDX-2.3","packages":[{"name":"openssl","versionInfo":"3.0.11-1~deb12u2","licenseDeclared":"Apache-2.0","licenseConcluded":"MIT",
			"externalRefs":[{"referenceType":"cpe23Type","referenceLocator":"cpe:2.3:a:openssl"},null,{"referenceType":"purl","referenceLocator":"pkg:deb/debian/openssl@3.0.11-1~deb12u2"},{"referenceType":"purl","referenceLocator":"pkg:deb/debian/other@1"}]},
			null,{"name":"img","primaryPackagePurpose":"CONTAINER","licenseDeclared":"NOASSERTION","externalRefs":null}]}`},
		{definition.ArtifactTypeCycloneDX, `{"bomFormat":"CycloneDX","metadata":{"component":{"type":"container","name":"app","version":"1"}},
			"components":[{"type":"library","name":"lodash","version":"4.17.20","purl":"pkg:npm/lodash@4.17.20","licenses":[{"license":{"id":"MIT","url":"u"}},{"expression":"MIT OR Apache-2.0"},{"license":{"name":"MIT"}},{"license":null}],
			"components":[{"type":"library","name":"core","group":"@angular","version":"17.0.0","purl":"pkg:npm/%40angular/core@17.0.0","licenses":[{"license":{"name":"custom"}}]},{"type":"file","name":"/f","components":[{"name":"in-file"}]}]},
			{"type":"file","name":"/etc/passwd"},{"type":"library","group":"org.example","name":"lib","version":"1.0","licenses":null,"components":null}]}`},
		{definition.ArtifactTypeSyft, `{"artifacts":[{"name":"requests","version":"2.31.0","type":"python","purl":"pkg:pypi/requests@2.31.0","licenses":["Apache-2.0","Apache-2.0"]},
			{"name":"x","version":"1","type":"binary","licenses":[{"value":"GPL","spdxExpression":""},null,{"value":"v","spdxExpression":"BSD-2-Clause"}]},null]}`},
	} {
		whole, err := bom.Read(strings.NewReader(c.doc), c.mt, bom.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		padded := strings.ReplaceAll(c.doc, `{"name"`, `{`+pad+`"name"`)
		padded = strings.ReplaceAll(padded, `{"type"`, `{`+pad+`"type"`)
		if len(padded) < len(c.doc)+140<<10 {
			t.Fatalf("%s: not padded", c.mt)
		}
		walked, err := bom.Read(strings.NewReader(padded), c.mt, bom.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(whole) != fmt.Sprint(walked) {
			t.Errorf("%s:\nwhole  %+v\nwalked %+v", c.mt, whole, walked)
		}
	}
	// A walked entry's mistakes are named as a decoded one's.
	for _, doc := range []string{`{"packages":[{"name":5}]}`, `{"packages":[{"externalRefs":[{"referenceType":[]}]}]}`, `{"packages":[{"externalRefs":{}}]}`, `{"packages":[5]}`} {
		_, e1 := bom.Read(strings.NewReader(doc), definition.ArtifactTypeSPDX, bom.Limits{})
		_, e2 := bom.Read(strings.NewReader(strings.Replace(doc, `[{`, `[{`+pad, 1)), definition.ArtifactTypeSPDX, bom.Limits{})
		if e1 == nil || e2 == nil {
			t.Errorf("%s: %v / %v", doc, e1, e2)
			continue
		}
		t.Logf("%s\n\twhole:  %v\n\twalked: %v", doc, e1, e2)
	}
}
