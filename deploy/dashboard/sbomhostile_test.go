package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// flood returns a doc func for sbomImage: the helper's CycloneDX
// document with its components replaced by n made by comp.
func flood(t testing.TB, n int, comp func(i int) map[string]any) func([]byte) []byte {
	return func(real []byte) []byte {
		var doc map[string]any
		if err := json.Unmarshal(real, &doc); err != nil {
			t.Fatal(err)
		}
		comps := make([]any, n)
		for i := range comps {
			comps[i] = comp(i)
		}
		doc["components"] = comps
		delete(doc, "dependencies")
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// npm is a CycloneDX component of an npm package.
func npm(name, version, license string) map[string]any {
	return map[string]any{"type": "library", "name": name, "version": version,
		"purl": "pkg:npm/" + url.PathEscape(name) + "@" + version, "licenses": []any{map[string]any{"license": map[string]any{"name": license}}}}
}

// Hostile SBOMs carried in a package: 200,000 components (the reader's
// bound, the document's subject one of them) whose names and
// licenses are markup, a name of 60 KiB, a name of 1 MiB. Each page is one
// page of rows (at most 500, each cell cut), everything escaped; an SBOM
// over the reader's limits is refused in one line.
func TestSBOMHostile(t *testing.T) {
	const script, img = `<script>alert("x")</script>`, `<img src=x onerror=alert(1)>`
	e := startSBOMs(t, definition.SBOMFormatCycloneDX,
		sbomImage{ref: "example.com/flood:1", platforms: []string{"linux/amd64"}, push: helloImage,
			doc: flood(t, 200_000-1, func(i int) map[string]any {
				return npm(fmt.Sprintf("%s%d", script, i), fmt.Sprintf("1.%d.0", i%1000), img)
			})},
		sbomImage{ref: "example.com/long:1", platforms: []string{"linux/amd64"}, push: helloImage,
			doc: flood(t, 3, func(i int) map[string]any {
				return npm(strings.Repeat("n", 60<<10)+fmt.Sprint(i), "1.0.0", strings.Repeat(img, 2000))
			})},
		sbomImage{ref: "example.com/huge:1", platforms: []string{"linux/amd64"}, push: helloImage,
			doc: flood(t, 1, func(int) map[string]any { return npm(strings.Repeat("h", 1<<20), "1.0.0", "MIT") })},
	)
	get := func(path string) (int, string) {
		t.Helper()
		resp, page := do(t, e.c, http.MethodGet, e.base+path, nil, map[string]string{"Accept": "text/html"})
		return resp.StatusCode, page
	}
	escaped := func(name, page string) {
		t.Helper()
		if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img") || strings.Count(page, "<script") != 1 {
			t.Errorf("%s: markup of the SBOM in the page", name)
		}
	}

	floodPage := e.page(e.sbomOf(t, "example.com/flood:1", "linux/amd64"))
	start := time.Now()
	status, page := get(floodPage)
	t.Logf("200,000 components: first page in %v, %d KiB", time.Since(start), len(page)>>10)
	if status != http.StatusOK || !strings.Contains(page, `id="total">200000<`) || len(rowsOf(page)) != sbomPerPage || len(page) > 256<<10 {
		t.Fatalf("200,000 components: %d, %d rows, %d bytes:\n%.2000s", status, len(rowsOf(page)), len(page), page)
	}
	escaped("200,000 components", page)
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;0") {
		t.Errorf("the names are not shown escaped:\n%.3000s", page)
	}
	for _, q := range []string{"?per=100000", "?per=100000&sort=version&dir=desc", "?per=100000&sort=licenses&q=" + url.QueryEscape("T>199"), "?page=401&sort=purl"} {
		start := time.Now()
		status, page := get(floodPage + q)
		t.Logf("200,000 components, %s: %v, %d KiB", q, time.Since(start), len(page)>>10)
		if status != http.StatusOK || len(rowsOf(page)) > sbomMaxPerPage || len(rowsOf(page)) == 0 || len(page) > 1<<20 {
			t.Errorf("%s: %d, %d rows, %d bytes", q, status, len(rowsOf(page)), len(page))
		}
		escaped(q, page)
	}

	// 60 KiB names and 56 KiB licenses: each cell cut (the fourth row the
	// document's subject).
	status, page = get(e.page(e.sbomOf(t, "example.com/long:1", "linux/amd64")))
	if status != http.StatusOK || len(rowsOf(page)) != 3+1 || len(page) > 64<<10 || !strings.Contains(page, strings.Repeat("n", maxCell)+"…") {
		t.Errorf("60 KiB names: %d, %d rows, %d bytes", status, len(rowsOf(page)), len(page))
	}
	escaped("60 KiB names", page)

	// A name of 1 MiB: over the reader's bound, refused in one line; the
	// document is still served as carried.
	huge := e.sbomOf(t, "example.com/huge:1", "linux/amd64")
	resp, line := do(t, e.c, http.MethodGet, e.base+e.page(huge), nil, nil)
	if resp.StatusCode != http.StatusUnprocessableEntity || strings.Count(strings.TrimSpace(line), "\n") != 0 || len(line) > 1024 {
		t.Errorf("a 1 MiB name: %s %.300q", resp.Status, line)
	}
	if resp, doc := do(t, e.c, http.MethodGet, e.base+e.page(huge)+"/document", nil, nil); resp.StatusCode != http.StatusOK || len(doc) < 1<<20 {
		t.Errorf("the document of a 1 MiB name: %s, %d bytes", resp.Status, len(doc))
	}
}
