package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

const helloRef = "example.com/org/hello:1.0"

// rowsOf are the table rows of a page, each its cells' text.
func rowsOf(page string) [][]string {
	var rows [][]string
	i, j := strings.Index(page, `<tbody>`), strings.Index(page, `</tbody>`)
	if i < 0 || j < i {
		return nil
	}
	body := page[i:j]
	for _, tr := range regexp.MustCompile(`(?s)<tr>(.*?)</tr>`).FindAllStringSubmatch(body, -1) {
		var cells []string
		for _, td := range regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(tr[1], -1) {
			cells = append(cells, strings.TrimSuffix(strings.TrimPrefix(td[1], "<code>"), "</code>"))
		}
		rows = append(rows, cells)
	}
	return rows
}

func names(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r[0])
	}
	return out
}

// The table of an image platform's SBOM as the real helper made it:
// every component the helper found, filtered by name and type, sorted by
// each column both ways, cut into pages; the document served as carried.
func TestSBOMPage(t *testing.T) {
	e := startSBOMs(t, "", sbomImage{ref: helloRef, platforms: []string{"linux/amd64", "linux/arm64"}, push: helloImage})
	s := e.sbomOf(t, helloRef, "linux/arm64")
	get := func(path string) string {
		t.Helper()
		resp, page := do(t, e.c, http.MethodGet, e.base+path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, page)
		}
		return page
	}
	// The package page links each image platform's SBOM.
	pkgPage := get("/c/lab/packages/ferry/demo")
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		if link := e.page(e.sbomOf(t, helloRef, p)); !strings.Contains(pkgPage, `href="`+link+`"`) {
			t.Errorf("the package page does not link the %s SBOM %s", p, link)
		}
	}
	page := get(e.page(s))
	rows := rowsOf(page)
	all := names(rows)
	for _, want := range []string{"libferry1", "ferry-tools", fixture.GoModule} {
		if !slices.Contains(all, want) {
			t.Errorf("the table lacks %s: %q", want, rows)
		}
	}
	if !slices.IsSorted(all) {
		t.Errorf("not sorted by name: %q", all)
	}
	if !strings.Contains(page, `id="total">`+fmt.Sprint(len(all))+`<`) || !strings.Contains(page, "linux/arm64") {
		t.Errorf("the page's facts:\n%s", page)
	}
	// Filters: a part of the name or package URL, any case; a type; both.
	var withFerry []string
	for _, r := range rows {
		if strings.Contains(strings.ToLower(r[0]+" "+r[4]), "ferry") {
			withFerry = append(withFerry, r[0])
		}
	}
	if got := names(rowsOf(get(e.page(s) + "?q=FERRY"))); len(withFerry) < 3 || !slices.Equal(got, withFerry) {
		t.Errorf("q=FERRY: %q, want %q", got, withFerry)
	}
	if got := names(rowsOf(get(e.page(s) + "?type=deb"))); !slices.Equal(got, []string{"ferry-tools", "libferry1"}) {
		t.Errorf("type=deb: %q", got)
	}
	if got := names(rowsOf(get(e.page(s) + "?type=deb&q=lib"))); !slices.Equal(got, []string{"libferry1"}) {
		t.Errorf("type=deb&q=lib: %q", got)
	}
	if got := rowsOf(get(e.page(s) + "?type=golang&q=" + url.QueryEscape(fixture.GoModule))); len(got) != 1 || got[0][2] != "golang" || !strings.HasPrefix(got[0][4], "pkg:golang/"+fixture.GoModule) {
		t.Errorf("the Go module: %q", got)
	}
	// Sort: descending by name; by type, then name.
	if got, want := names(rowsOf(get(e.page(s)+"?dir=desc"))), slices.Clone(all); !slices.Equal(got, func() []string { slices.Reverse(want); return want }()) {
		t.Errorf("dir=desc: %q", got)
	}
	byType := rowsOf(get(e.page(s) + "?sort=type"))
	if !slices.IsSortedFunc(byType, func(a, b []string) int { return strings.Compare(a[2], b[2]) }) {
		t.Errorf("sort=type: %q", byType)
	}
	// Pages of one row: each the next name, the links there and back.
	one := get(e.page(s) + "?per=1&page=2")
	if got := names(rowsOf(one)); !slices.Equal(got, all[1:2]) || !strings.Contains(one, `id="prev"`) || !strings.Contains(one, `page=3`) {
		t.Errorf("page 2 of 1 row: %q", got)
	}
	if got := names(rowsOf(get(e.page(s) + "?per=1&page=99999"))); !slices.Equal(got, all[len(all)-1:]) {
		t.Errorf("a page past the end: %q, want the last", got)
	}
	// A filter too long: one line, 200, the table whole.
	long := get(e.page(s) + "?q=" + strings.Repeat("x", 4096))
	if !strings.Contains(long, `id="filter-error">the filter is 4096 bytes long; at most 1024<`) || len(rowsOf(long)) != len(all) {
		t.Errorf("a 4 KiB filter:\n%.2000s", long)
	}

	// The document: its bytes as the registry holds them, its media
	// type, a file name of the image and platform.
	resp, doc := do(t, e.c, http.MethodGet, e.base+e.page(s)+"/document", nil, nil)
	blob := sbomBlob(t, e, s.Digest)
	if resp.StatusCode != http.StatusOK || doc != string(blob) || digest.FromString(doc) != digest.FromBytes(blob) {
		t.Fatalf("document: %s, %d bytes, want the %d of the blob", resp.Status, len(doc), len(blob))
	}
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != definition.ArtifactTypeSPDX || cd != `attachment; filename="hello-1.0-linux-arm64.spdx.json"` {
		t.Errorf("document headers: %q, %q", ct, cd)
	}

	// Refusals, each in one line: no such SBOM (another image's
	// manifest, a digest of nothing), not a digest, no such Package.
	for path, want := range map[string]int{
		"/c/lab/packages/ferry/demo/sboms/" + s.Subject.String():                            http.StatusNotFound,
		"/c/lab/packages/ferry/demo/sboms/" + digest.FromString("x").String():               http.StatusNotFound,
		"/c/lab/packages/ferry/demo/sboms/sha256:xyz/document":                              http.StatusBadRequest,
		"/c/lab/packages/ferry/other/sboms/" + s.Digest.String():                            http.StatusNotFound,
		"/c/lab/packages/ferry/demo/sboms/" + digest.FromString("x").String() + "/document": http.StatusNotFound,
	} {
		resp, body := do(t, e.c, http.MethodGet, e.base+path, nil, nil)
		if resp.StatusCode != want || strings.Count(strings.TrimSpace(body), "\n") != 0 {
			t.Errorf("GET %s: %s %q, want a one-line %d", path, resp.Status, body, want)
		}
	}
}

// sbomBlob is the document of SBOM manifest d, fetched from the registry.
func sbomBlob(t testing.TB, e *sbomEnv, d digest.Digest) []byte {
	t.Helper()
	ctx := context.Background()
	desc, err := e.repo.Resolve(ctx, d.String())
	if err != nil {
		t.Fatal(err)
	}
	m, err := content.FetchAll(ctx, e.repo, desc)
	if err != nil {
		t.Fatal(err)
	}
	var sm ocispec.Manifest
	if err := json.Unmarshal(m, &sm); err != nil {
		t.Fatal(err)
	}
	blob, err := content.FetchAll(ctx, e.repo, sm.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	return blob
}

// The table's order and filter, on components made up to reach every
// case (no SBOM is read here).
func TestTable(t *testing.T) {
	comps := []bom.Component{
		{Name: "b", Version: "1.10.0", Type: "golang", PURL: "pkg:golang/b@v1.10.0"},
		{Name: "b", Version: "1.9.0", Type: "golang", PURL: "pkg:golang/b@v1.9.0"},
		{Name: "a", Version: "2", Type: "deb", PURL: "pkg:deb/debian/a@2", Licenses: []string{"MIT"}},
		{Name: "c", Type: "npm"},
	}
	f, _ := parseFilter(url.Values{"sort": {"version"}})
	tb := newTable(newSBOMEntry(comps), f)
	var got []string
	for _, r := range tb.Rows {
		got = append(got, r.Name+"@"+r.Version)
	}
	// Go's own order: 1.9.0 before 1.10.0.
	if i, j := slices.Index(got, "b@1.9.0"), slices.Index(got, "b@1.10.0"); i > j {
		t.Errorf("by version: %q", got)
	}
	if comps[0].Version != "1.10.0" {
		t.Error("newTable changed its input")
	}
	f, _ = parseFilter(url.Values{"q": {"PKG:GOLANG"}, "per": {"1"}})
	tb = newTable(newSBOMEntry(comps), f)
	if tb.Matched != 2 || tb.Pages != 2 || len(tb.Rows) != 1 || tb.Next != "?per=1&page=2&q=PKG%3AGOLANG" && tb.Next != "?page=2&per=1&q=PKG%3AGOLANG" {
		t.Errorf("q, per: %+v", tb)
	}
	if got := clip(strings.Repeat("é", 1000)); len(got) > maxCell+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Errorf("clip: %q", got)
	}
	for _, c := range []struct{ image, platform, want string }{
		{"example.com/org/hello:1.0", "linux/arm64", "hello-1.0-linux-arm64.spdx.json"},
		{`x/"; evil=1 <b>`, "linux/amd64", "-evil-1--b--linux-amd64.spdx.json"},
		{"", "", "sbom.spdx.json"},
	} {
		got := sbomFileName(c.image, c.platform, definition.ArtifactTypeSPDX)
		if got != strings.Trim(c.want, "-") && got != c.want {
			t.Errorf("sbomFileName(%q, %q) = %q", c.image, c.platform, got)
		}
		if strings.ContainsAny(got, `"; <>/\`) {
			t.Errorf("sbomFileName(%q) = %q: not a safe name", c.image, got)
		}
	}
}
