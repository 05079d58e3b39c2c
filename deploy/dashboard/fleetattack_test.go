package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestFleetViewerCarries: a user RBAC lets read the fleet but not write a
// member's status gets no carry bundle — it is made from the centre's
// registry with the dashboard's credentials, not the user's — and may not
// import a report, whose receipts would go into that registry before the
// API server refused the member's update: each refused in one line (403)
// before the centre is asked anything; nor may one who may not update a
// track promote to it (its tag is resolved in that registry). Without the
// CSRF token, none is even looked at.
func TestFleetViewerCarries(t *testing.T) {
	e := startFleet(t, true, fleetObjects()...)
	e.login(t, "viewer-token")
	status, page := get(t, e, "/fleet/members/ship-1")
	if status != http.StatusOK {
		t.Fatalf("the member page as a viewer: %d\n%s", status, text(page))
	}
	resp, body := post(t, e, "/fleet/members/ship-1/bundle", page, url.Values{"package": {"web"}})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `id="error">bundle of web: viewer may not update members/status of member ship-1 in namespace ferry-fleet`) {
		t.Errorf("a viewer's bundle: %s\n%.400s", resp.Status, text(body))
	}
	form, ct := multipartReport(t, []byte("signed report of ship-1"))
	resp, body = do(t, e.c, http.MethodPost, e.base+"/fleet/import?from=ship-1&csrf="+url.QueryEscape(csrf(t, page)), form, map[string]string{"Content-Type": ct})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `id="error">import: viewer may not update members/status in namespace ferry-fleet`) {
		t.Errorf("a viewer's import: %s\n%.400s", resp.Status, text(body))
	}
	// A promotion resolves its tag in that registry: not for a viewer.
	_, track := get(t, e, "/fleet/tracks/web")
	resp, body = post(t, e, "/fleet/tracks/web/promote", track, url.Values{"channel": {"stable"}, "ref": {"1.2.0"}})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `id="error">promote: viewer may not update releasetracks of releasetrack web in namespace ferry-fleet`) {
		t.Errorf("a viewer's promotion: %s\n%.400s", resp.Status, text(body))
	}
	for _, path := range []string{"/fleet/members/ship-1/bundle", "/fleet/import", "/fleet/tracks/web/promote", "/fleet/placements/web-prod/rollback"} {
		if resp, _ := do(t, e.c, http.MethodPost, e.base+path, strings.NewReader("package=web"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without the CSRF token: %s", path, resp.Status)
		}
	}
	if c := e.called(); len(c) != 0 {
		t.Errorf("the centre was asked %q", c)
	}

	// A user who may: served.
	e.login(t, "alice-token")
	_, page = get(t, e, "/fleet/members/ship-1")
	if resp, body := post(t, e, "/fleet/members/ship-1/bundle", page, url.Values{"package": {"web"}}); resp.StatusCode != http.StatusOK || body != fakeBundle {
		t.Errorf("alice's bundle: %s %.300s", resp.Status, text(body))
	}
}
