package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The fleet's search and findings in a real browser, reached by the
// fleet's nav, over real SBOMs in a real registry: the members that run
// the affected version, the findings by member with their counts and
// totals, the database shown as old (its class and warning as rendered).
func TestFleetSBOMInBrowser(t *testing.T) {
	f := newFleetSBOMs(t)
	e := f.serve(t, false, 24*time.Hour, f.objects(true)...)
	s := newBrowserSession(t)

	s.run(chromedp.Navigate(e.base+"/fleet"), chromedp.Click(chromedp.CSS("#fleetnav-search")))
	s.waitText("h1", "SBOM search")
	s.run(chromedp.SetValue(chromedp.CSS("#q"), "pkg:golang/golang.org/x/net@<0.13.0"), chromedp.Click(chromedp.CSS("#search-btn")))
	s.waitText("#summary", "Components matching pkg:golang/golang.org/x/net@<0.13.0: 1, in 2 SBOMs")
	if got := s.texts("#hits td.h-version"); !slices.Equal(got, []string{"v0.11.0"}) {
		t.Errorf("the hit's version: %q", got)
	}
	if got := s.texts("#hits td.h-runs"); len(got) != 1 || got[0] != "member edge-1member ship-1" {
		t.Errorf("where it runs: %q", got)
	}
	s.shot("fleet-sbom-search.png")

	s.run(chromedp.Click(chromedp.CSS("#fleetnav-audit")))
	s.waitText("#db-old", "older than 24 hours")
	old, err := chromedp.Run(s.ctx, chromedp.Evaluate[bool](`document.querySelector('#db').classList.contains('stale-db') && getComputedStyle(document.querySelector('#db-old')).display !== 'none'`))
	if err != nil || !old {
		t.Errorf("the database is not shown as old: %v", err)
	}
	if got := s.texts("#members td.m-name"); !slices.Equal(got, []string{"edge-1", "ship-1", "edge-2"}) {
		t.Errorf("the members with findings: %q", got)
	}
	counts := s.texts("#members td.m-findings")
	ids := s.texts(".f-id")
	totals := s.waitText("#totals", "findings of")
	if len(counts) != 3 || counts[0] != counts[1] || !strings.HasPrefix(totals, fmt.Sprint(len(ids))+" findings") || !strings.HasSuffix(totals, "on 3 members") {
		t.Errorf("counts %q, %d findings listed, totals %q", counts, len(ids), totals)
	}
	if !slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, "GO-2023-1988") }) {
		t.Errorf("GO-2023-1988 is not among the findings: %q", ids)
	}
	s.shot("fleet-sbom-findings-old-db.png")
	s.noErrors()
}
