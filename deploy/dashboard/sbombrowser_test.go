package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/opencontainers/go-digest"

	testbrowser "github.com/ferrypkg/ferry/internal/testsupport/browser"
)

// browserSession is a browser on a dashboard with the helpers its tests
// share: actions, waiting for a text, the texts of many nodes, shots.
type browserSession struct {
	t       *testing.T
	ctx     context.Context
	console *testbrowser.Log
}

func newBrowserSession(t *testing.T) *browserSession {
	b, console := testbrowser.New(t)
	ctx, cancel := context.WithTimeout(b, 3*time.Minute)
	t.Cleanup(cancel)
	return &browserSession{t: t, ctx: ctx, console: console}
}

func (s *browserSession) run(actions ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	if err := chromedp.Do(s.ctx, actions...); err != nil {
		s.t.Fatal(err)
	}
}

// waitText waits until sel's text holds want, and returns it.
func (s *browserSession) waitText(sel, want string) string {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		got, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		cancel()
		if err == nil && strings.Contains(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(s.ctx, chromedp.Text(chromedp.CSS("main")))
			s.t.Fatalf("%s: %q (%v), want %q; the page says:\n%.3000s", sel, got, err, want, page)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// texts are the text of every node sel selects, as the page renders them.
func (s *browserSession) texts(sel string) []string {
	s.t.Helper()
	got, err := chromedp.Run(s.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+jsString(sel)+`), n => n.textContent)`))
	if err != nil {
		s.t.Fatal(err)
	}
	return got
}

func jsString(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// shot saves a screenshot of the page in the test's artifacts and checks
// that it is an image of the page's width.
func (s *browserSession) shot(name string) {
	s.t.Helper()
	b, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() < 1000 || img.Bounds().Dy() < 200 {
		s.t.Fatalf("screenshot %s: %v %v", name, err, img.Bounds())
	}
	if err := os.WriteFile(filepath.Join(s.t.ArtifactDir(), name), b, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *browserSession) noErrors() {
	s.t.Helper()
	if errs := s.console.Errors(); len(errs) > 0 {
		s.t.Errorf("the pages logged errors: %q", errs)
	}
}

// An image's SBOM in a real browser, as the real helper made it: reached
// from the package page, filtered by a word typed in and a type picked,
// sorted by clicking the headers, and downloaded: the file the browser
// saves is the blob the registry holds.
func TestSBOMInBrowser(t *testing.T) {
	e := startSBOMs(t, "", sbomImage{ref: helloRef, platforms: []string{"linux/amd64", "linux/arm64"}, push: helloImage})
	amd := e.sbomOf(t, helloRef, "linux/amd64")
	s := newBrowserSession(t)

	s.run(chromedp.Navigate(e.base + "/c/lab/packages/ferry/demo"))
	s.waitText("#sboms", "linux/arm64")
	s.run(chromedp.Click(chromedp.CSS(`#sboms a[href="` + e.page(amd) + `"]`)))
	s.waitText("h1", "linux/amd64")
	total := s.waitText("#total", "")
	all := s.texts("#components td.c-name")
	if total != "5" || len(all) != 5 || !slices.IsSorted(all) || !slices.Contains(all, "libferry1") {
		t.Errorf("the table: %s components, names %q", total, all)
	}
	s.shot("sbom-table.png")

	// Filtered: "FERRY" typed, deb picked.
	s.run(chromedp.SetValue(chromedp.CSS("#q"), "FERRY"), chromedp.SetValue(chromedp.CSS("#type"), "deb"), chromedp.Click(chromedp.CSS("#filter-btn")))
	s.waitText("#matched", "2 of 5 components")
	if got := s.texts("#components td.c-name"); !slices.Equal(got, []string{"ferry-tools", "libferry1"}) {
		t.Errorf("filtered: %q", got)
	}
	if got := s.texts("#components td.c-type"); !slices.Equal(got, []string{"deb", "deb"}) {
		t.Errorf("filtered types: %q", got)
	}
	// Sorted by name, the other way, then by version: the filter kept.
	s.run(chromedp.Click(chromedp.CSS("#sort-name")))
	s.waitText("#components thead", "▼")
	if got := s.texts("#components td.c-name"); !slices.Equal(got, []string{"libferry1", "ferry-tools"}) {
		t.Errorf("by name, descending: %q", got)
	}
	s.run(chromedp.Click(chromedp.CSS("#sort-version")))
	s.waitText("#matched", "2 of 5 components")
	if got := s.texts("#components td.c-version"); !slices.Equal(got, []string{"0.9.0-2", "1.2.3-1"}) {
		t.Errorf("by version: %q", got)
	}
	s.shot("sbom-table-filtered-sorted.png")

	// The download: the file saved is the document as carried.
	dir := t.TempDir()
	progress := chromedp.Events(s.ctx, browser.DownloadProgress)
	s.run(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true)})
		return err
	}), chromedp.Click(chromedp.CSS("#download")))
	var saved []byte
	for ev, err := range progress {
		if err != nil {
			t.Fatal(err)
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatal("the download was cancelled")
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			if saved, err = os.ReadFile(filepath.Join(dir, ev.GUID)); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	blob := sbomBlob(t, e, amd.Digest)
	if !bytes.Equal(saved, blob) || digest.FromBytes(saved) != digest.FromBytes(blob) {
		t.Errorf("the file saved: %d bytes, want the %d of the blob", len(saved), len(blob))
	}
	s.noErrors()
}

// Search and findings in a real browser, over a cluster whose registry
// the dashboard may only read: a query typed in names the affected image
// and where it runs, its link opens the SBOM filtered to the component;
// the findings page shows the deployed database as old (its warning
// class), the advisory under the affected image, the totals.
func TestSBOMSearchAndFindingsInBrowser(t *testing.T) {
	e := startCluster(t, true, Options{AdvisoryMaxAge: 24 * time.Hour})
	s := newBrowserSession(t)

	s.run(chromedp.Navigate(e.base+"/"), chromedp.Click(chromedp.CSS("#nav-search")))
	s.waitText("h1", "SBOM search")
	s.run(chromedp.SetValue(chromedp.CSS("#q"), "pkg:golang/golang.org/x/net@<0.13.0"), chromedp.Click(chromedp.CSS("#search-btn")))
	s.waitText("#summary", "Components matching pkg:golang/golang.org/x/net@<0.13.0: 1, in ")
	if got := s.texts("#hits td.h-version"); !slices.Equal(got, []string{"v0.11.0"}) {
		t.Errorf("the hit's version: %q", got)
	}
	if got := s.texts("#hits td.h-runs"); len(got) != 1 || !strings.Contains(got[0], "ferry/audit") || !strings.Contains(got[0], "pod web/affected-1") {
		t.Errorf("where it runs: %q", got)
	}
	s.shot("sbom-search.png")
	s.run(chromedp.Click(chromedp.CSS("#hits td.h-name a")))
	s.waitText("h1", affectedRef)
	s.waitText("#matched", "1 of ")
	if got := s.texts("#components td.c-name"); !slices.Equal(got, []string{"golang.org/x/net"}) {
		t.Errorf("the SBOM filtered to the hit: %q", got)
	}
	// A query that is not one: its line, the page served.
	s.run(chromedp.Click(chromedp.CSS("#nav-search")), chromedp.SetValue(chromedp.CSS("#q"), "pkg:golang/x@<<1"), chromedp.Click(chromedp.CSS("#search-btn")))
	s.waitText("#search-error", "")

	s.run(chromedp.Click(chromedp.CSS("#nav-audit")))
	s.waitText("#db-old", "older than 24 hours")
	old, err := chromedp.Run(s.ctx, chromedp.Evaluate[bool](`document.querySelector('#db').classList.contains('stale-db') && getComputedStyle(document.querySelector('#db-old')).display !== 'none'`))
	if err != nil || !old {
		t.Errorf("the database is not shown as old: %v", err)
	}
	totals := s.waitText("#totals", "findings of")
	if ids := s.texts(".f-id"); len(ids) == 0 || !strings.HasPrefix(ids[0], "GO-2023-1988") || !strings.HasPrefix(totals, fmt.Sprint(len(ids))+" findings") {
		t.Errorf("findings %q, totals %q", ids, totals)
	}
	if got := s.texts(".f-installed"); len(got) == 0 || got[0] != "v0.11.0" {
		t.Errorf("installed: %q", got)
	}
	s.shot("sbom-findings-old-db.png")
	s.noErrors()
}
