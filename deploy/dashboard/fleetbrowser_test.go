package dashboard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/internal/testsupport/browser"
)

// The fleet's pages in a real browser, over the real centre and a fake
// management cluster:
// the members and their filter, the matrix, a placement whose rollout
// halted and its rollback, a track's promote form. Each page is read as
// the browser renders it (under the CSP, no console error) and saved as
// a screenshot in the test's artifacts.
func TestFleetInBrowser(t *testing.T) {
	e := startFleet(t, false, fleetObjects()...)
	e.useCentre(t)
	b, console := browser.New(t)
	ctx, cancel := context.WithTimeout(b, 2*time.Minute)
	defer cancel()
	// waitText waits until sel's text holds want, and returns it.
	waitText := func(sel, want string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
			tcancel()
			if err == nil && strings.Contains(got, want) {
				return got
			}
			if time.Now().After(deadline) {
				page, _ := chromedp.Run(b, chromedp.Text(chromedp.CSS("main")))
				t.Fatalf("%s: %q (%v), want %q; the page says:\n%s", sel, got, err, want, page)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(t.ArtifactDir(), name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatal(err)
		}
	}

	// Members, then filtered by a label typed in.
	run(chromedp.Navigate(e.base + "/fleet"))
	waitText("#counts", "5 members: 4 connected, 1 carried · 2 Ready, 3 not Ready · 2 stale · 1 revoked")
	if got := waitText(`tr[data-name="edge-3"]`, "Refused"); !strings.Contains(got, "no trusted key verifies") {
		t.Errorf("edge-3's row: %q", got)
	}
	shot("fleet-members.png")
	run(chromedp.SetValue(chromedp.CSS("#selector"), "env=prod,region=us"), chromedp.Click(chromedp.CSS("#filter-btn")))
	waitText("#counts", "2 members selected: 2 connected")
	shot("fleet-members-filtered.png")

	// The matrix, reached by the fleet's nav.
	run(chromedp.Click(chromedp.CSS(`nav.fleetnav a[href="/fleet/matrix"]`)))
	if got := waitText(`tr[data-name="edge-3"]`, "Refused"); !strings.Contains(got, "1.0.0") || !strings.Contains(got, "0.1.0") || !strings.Contains(got, "NotReady") {
		t.Errorf("edge-3 in the matrix: %q", got)
	}
	waitText("#matrix thead", "beta 1.2.0-rc.1")
	shot("fleet-matrix.png")

	// A halted rollout, then its rollback.
	run(chromedp.Navigate(e.base + "/fleet/placements/web-prod"))
	waitText("#halted", "member edge-3 refused")
	waitText("#phase", "Halted, wave 1")
	waitText(`#placed tr[data-name="edge-3"]`, "Refused")
	waitText("#history", "alice")
	shot("fleet-placement-halted.png")
	run(chromedp.Click(chromedp.CSS("#rollback-btn")))
	waitText("#notice", "rollback asked by kubernetes-admin: placement web-prod is pinned to "+shortDigest(dg(10)))
	waitText("#rollout", "pinned to 1.0.0")
	shot("fleet-placement-rolled-back.png")

	// A promotion typed into the track's form.
	run(chromedp.Navigate(e.base+"/fleet/tracks/web"),
		chromedp.SetValue(chromedp.CSS("#channel"), "stable"), chromedp.SetValue(chromedp.CSS("#ref"), "1.2.0"),
		chromedp.Click(chromedp.CSS("#promote-btn")))
	waitText("#notice", "promoted by kubernetes-admin: channel stable of web is 1.2.0")
	waitText(`#channels tr[data-name="stable"]`, "1.2.0")
	waitText("#promotions", "kubernetes-admin")
	shot("fleet-track-promoted.png")

	if p := e.placement(t, "web-prod"); p.Spec.Digest != dg(10) || p.Annotations[centre.AnnotationBy] != "kubernetes-admin" {
		t.Errorf("after the rollback: %+v %v", p.Spec, p.Annotations)
	}
	if errs := console.Errors(); len(errs) > 0 {
		t.Errorf("the pages logged errors: %q", errs)
	}
}
