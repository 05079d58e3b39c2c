package registry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// catalogGet GETs a catalog page and returns its names and next page URL
// ("" when none).
func catalogGet(t *testing.T, u string) ([]string, string) {
	t.Helper()
	resp, body := call(t, http.MethodGet, u, "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", u, resp.Status, body)
	}
	var page catalogPage
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, body)
	}
	if page.Repositories == nil {
		t.Fatalf("GET %s: %s, want a list (maybe empty)", u, body)
	}
	next := ""
	if link := resp.Header.Get("Link"); link != "" {
		target, _, _ := strings.Cut(link, ";")
		nu, err := resp.Request.URL.Parse(strings.Trim(target, "<> "))
		if err != nil {
			t.Fatal(err)
		}
		next = nu.String()
	}
	return page.Repositories, next
}

// TestCatalogNested lists repositories nested in each other, whose names
// sort around the storage's own folder names ("a/0" before "_manifests",
// "a/b" after it) and around "/" ("a-b" and "a.b" before "a/…", "a0" and
// "a_b" after): every page, for every last (names, names that are not
// there, hostile ones) and n, is the lexical slice after last, with a Link
// header exactly when more follow, and paging through the Links lists every
// repository once. distribution's own catalog listed "a/0" before "a" and,
// with last and a small n, indexed past its page (a panic: the connection
// dropped).
func TestCatalogNested(t *testing.T) {
	names := []string{"a", "a-b", "a.b", "a/0", "a/0/z", "a/1x", "a/9", "a/b", "a/b/0", "a/b/c-d", "a0", "a9", "a_b", "a__b", "ab/0", "b", "z9/9", "z9a"}
	slices.Sort(names)
	forEachStorage(t, func(t *testing.T, cfg registry.Config) {
		ts := registrytest.NewServer(t, cfg)
		shuffled := slices.Clone(names)
		slices.Reverse(shuffled)
		pushRepos(t, ts.URL, shuffled...)

		lasts := append([]string{"", "A", "a/", "a/0/", "a/Z", "a~", "zzz", "\x00", "a/b/0\x00", strings.Repeat("a/", 300)}, names...)
		for _, last := range lasts {
			i, _ := slices.BinarySearch(names, last)
			if i < len(names) && names[i] == last {
				i++
			}
			after := names[i:]
			for _, n := range []int{1, 2, 3, 100} {
				q := url.Values{"n": {fmt.Sprint(n)}}
				if last != "" {
					q.Set("last", last)
				}
				got, next := catalogGet(t, ts.URL+"/v2/_catalog?"+q.Encode())
				want := after[:min(n, len(after))]
				if !slices.Equal(got, want) {
					t.Fatalf("n=%d last=%q: %v, want %v", n, last, got, want)
				}
				if (next != "") != (len(after) > n) {
					t.Fatalf("n=%d last=%q: next page %q, want one: %v", n, last, next, len(after) > n)
				}
			}
		}
		for _, n := range []int{1, 2, 3} {
			var all []string
			next := fmt.Sprintf("%s/v2/_catalog?n=%d", ts.URL, n)
			for pages := 0; next != ""; pages++ {
				if pages > len(names) {
					t.Fatalf("n=%d: paging does not end: %v", n, all)
				}
				var got []string
				got, next = catalogGet(t, next)
				all = append(all, got...)
			}
			if !slices.Equal(all, names) {
				t.Fatalf("n=%d: paged %v, want %v", n, all, names)
			}
		}
		all, next := catalogGet(t, ts.URL+"/v2/_catalog")
		if !slices.Equal(all, names) || next != "" {
			t.Fatalf("whole catalog: %v (next %q), want %v", all, next, names)
		}
		for _, q := range []string{"n=-1", "n=many", "n=1e3", "n=99999999999999999999"} {
			resp, body := call(t, http.MethodGet, ts.URL+"/v2/_catalog?"+q, "", nil)
			if resp.StatusCode != http.StatusBadRequest || errorCode(body) != "PAGINATION_NUMBER_INVALID" {
				t.Fatalf("%s: %s %s, want 400 PAGINATION_NUMBER_INVALID", q, resp.Status, body)
			}
		}
		resp, body := call(t, http.MethodHead, ts.URL+"/v2/_catalog", "", nil)
		if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Length") == "" {
			t.Fatalf("HEAD: %s, %d bytes, Content-Length %q", resp.Status, len(body), resp.Header.Get("Content-Length"))
		}
	})
}

// TestCatalogIndexesOldStorage: a storage whose repositories were pushed
// before the catalog was indexed (a registry made by an older ferry) is
// indexed when a registry opens it.
func TestCatalogIndexesOldStorage(t *testing.T) {
	root := t.TempDir()
	names := []string{"app", "app/0", "app/sub", "lib/x"}
	base, stop := startAt(t, root)
	pushRepos(t, base, names...)
	stop()
	if err := os.RemoveAll(filepath.Join(root, "ferry", "catalog")); err != nil {
		t.Fatal(err)
	}
	base, stop = startAt(t, root)
	defer stop()
	if got, _ := catalogGet(t, base+"/v2/_catalog"); !slices.Equal(got, names) {
		t.Fatalf("catalog of an unindexed storage: %v, want %v", got, names)
	}
}

// TestCatalogScale pages through the catalog of 10,000 repositories, 100 at
// a time, on the filesystem: every name once, in order, within the budget
// of a later issue (1 s for all of it). The repositories are made in
// distribution's layout on disk and indexed when the registry opens it.
func TestCatalogScale(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 repositories")
	}
	root := t.TempDir()
	var names []string
	for i := range 10_000 {
		name := fmt.Sprintf("team%02d/app%04d", i%100, i)
		if i%10 == 0 {
			name += "/sub"
		}
		names = append(names, name)
		if err := os.MkdirAll(filepath.Join(root, "docker/registry/v2/repositories", name, "_manifests/tags"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	start := time.Now()
	ts := registrytest.NewServer(t, registry.Config{RootDir: root})
	t.Logf("indexing 10,000 repositories: %v", time.Since(start).Round(time.Millisecond))

	pageAll := func() ([]string, int, time.Duration) {
		start := time.Now()
		var all []string
		next := ts.URL + "/v2/_catalog?n=100"
		pages := 0
		for ; next != ""; pages++ {
			var got []string
			got, next = catalogGet(t, next)
			all = append(all, got...)
		}
		return all, pages, time.Since(start)
	}
	// Right after indexing, the index folder changed within the second
	// and every page reads it again; then it is read once.
	all, pages, cold := pageAll()
	var took time.Duration
	if !slices.Equal(all, names) {
		t.Fatalf("paged %d names, want the %d made, in order", len(all), len(names))
	}
	time.Sleep(time.Second)
	all, _, took = pageAll()
	if !slices.Equal(all, names) {
		t.Fatalf("paged %d names again, want the %d made, in order", len(all), len(names))
	}
	t.Logf("paging 10,000 repositories, 100 a page: %d pages in %v (%v right after indexing)", pages, took.Round(time.Millisecond), cold.Round(time.Millisecond))
	// 1 s is the budget; the test allows for a loaded machine.
	if took > 3*time.Second {
		t.Fatalf("paging 10,000 repositories took %v, budget 1 s", took)
	}
}
