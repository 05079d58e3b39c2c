package dashboard

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

var tags = regexp.MustCompile(`<[^>]*>`)

// text is a page's text, its tags and extra spaces removed.
func text(page string) string {
	return strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(page, " "))), " ")
}

// rowOf is the text of the table row data-name names.
func rowOf(t *testing.T, page, name string) string {
	t.Helper()
	i := strings.Index(page, `data-name="`+name+`"`)
	if i < 0 {
		t.Fatalf("no row %s in the page:\n%s", name, text(page))
	}
	row := page[i:]
	row = row[:strings.Index(row, "</tr>")]
	return text("<" + row)
}

// after is what follows marker in page.
func after(page, marker string) string {
	i := strings.Index(page, marker)
	if i < 0 {
		return ""
	}
	return page[i+len(marker):]
}

func get(t *testing.T, e *fleetEnv, path string) (int, string) {
	t.Helper()
	resp, page := do(t, e.c, http.MethodGet, e.base+path, nil, map[string]string{"Accept": "text/html"})
	return resp.StatusCode, page
}

// post sends a form with the session's CSRF token (read from page).
func post(t *testing.T, e *fleetEnv, path, page string, form url.Values) (*http.Response, string) {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", csrf(t, page))
	return do(t, e.c, http.MethodPost, e.base+path, strings.NewReader(form.Encode()),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"})
}

func TestFleetMembersPage(t *testing.T) {
	e := startFleet(t, false, fleetObjects()...)
	status, page := get(t, e, "/fleet")
	if status != http.StatusOK {
		t.Fatalf("/fleet: %d\n%s", status, text(page))
	}
	if !strings.Contains(page, `id="nav-fleet"`) {
		t.Error("the nav has no Fleet link")
	}
	counts := text(after(page, `id="counts">`))
	if want := "5 members: 4 connected, 1 carried · 2 Ready, 3 not Ready · 2 stale · 1 revoked"; !strings.HasPrefix(counts, want) {
		t.Errorf("counts: %q, want %q", counts[:min(len(counts), 120)], want)
	}
	for name, want := range map[string][]string{
		"edge-1": {"edge-1 env=prod fleet.ferry.dev/canary=true region=eu Connected", "s ago", "True", "web 1.1.0 Ready", "db 2.0.0 Ready"},
		"edge-2": {"5m ago Stale False", "web 1.0.0 Updating"},
		"edge-3": {"web 1.0.0 Refused Unverified: no trusted key verifies", "site-tool 0.1.0 NotReady Failed: chart site-tool: timed out"},
		"ship-1": {"env=sea Carried 3d ago", "web 1.0.0 Ready"},
		"old-1":  {"revoked"},
	} {
		row := rowOf(t, page, name)
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("%s's row %q lacks %q", name, row, w)
			}
		}
	}
	// A label filters, and each label is a link to its filter.
	if !strings.Contains(page, `href="/fleet?selector=region%3deu"`) {
		t.Error("a label is not a link to its filter")
	}
	status, page = get(t, e, "/fleet?selector="+url.QueryEscape("env=prod,region=us"))
	if status != http.StatusOK || !strings.Contains(text(page), "2 members selected: 2 connected") || strings.Contains(page, `data-name="edge-1"`) {
		t.Errorf("filtered by env=prod,region=us: %d %s", status, text(page))
	}
	// A selector that does not parse: one line, 400.
	status, page = get(t, e, "/fleet?selector="+url.QueryEscape("env in prod"))
	if status != http.StatusBadRequest || !strings.Contains(page, `<p class="error" id="error">label selector &#34;env in prod&#34;: `) {
		t.Errorf("a bad selector: %d %s", status, text(page))
	}
}

func TestFleetMatrix(t *testing.T) {
	e := startFleet(t, false, fleetObjects()...)
	status, page := get(t, e, "/fleet/matrix")
	if status != http.StatusOK {
		t.Fatalf("/fleet/matrix: %d\n%s", status, text(page))
	}
	head := text(page[strings.Index(page, "<thead>"):strings.Index(page, "</thead>")])
	if want := "Member db track db stable 2.0.0 web track web stable 1.1.0 beta 1.2.0-rc.1 site-tool deployed at the site"; head != want {
		t.Errorf("matrix columns: %q, want %q", head, want)
	}
	for name, want := range map[string]string{
		"edge-1": "edge-1 Connected 2.0.0 Ready 1.1.0 Ready –",
		"edge-2": "edge-2 Connected, stale – 1.0.0 Updating –",
		"edge-3": "edge-3 Connected – 1.0.0 Refused no trusted key verifies " + dg(11) + " 0.1.0 NotReady chart site-tool: timed out",
		"ship-1": "ship-1 Carried – 1.0.0 Ready –",
	} {
		if got := rowOf(t, page, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

func TestFleetPlacementAndRollback(t *testing.T) {
	e := startFleet(t, false, fleetObjects()...)
	e.useCentre(t)
	status, page := get(t, e, "/fleet/placements/web-prod")
	if status != http.StatusOK {
		t.Fatalf("placement: %d\n%s", status, text(page))
	}
	for _, want := range []string{
		"Placement web-prod Halted",
		"Track web , channel stable Rolling out 1.1.0 (" + shortDigest(dg(11)) + ") Phase Halted, wave 1",
		"Halted member edge-3 refused " + dg(11) + ": no trusted key verifies it",
		"Current 1.0.0 (" + shortDigest(dg(10)) + ") Previous " + shortDigest(dg(9)),
		"Roll back to 1.0.0 (" + shortDigest(dg(10)) + ")",
	} {
		if !strings.Contains(text(page), want) {
			t.Errorf("the placement page lacks %q:\n%s", want, text(page))
		}
	}
	if got, want := rowOf(t, page, "edge-3"), "edge-3 1 1.1.0 ("+shortDigest(dg(11))+") Refused 20m ago no trusted key verifies it"; got != want {
		t.Errorf("edge-3: %q, want %q", got, want)
	}
	hist := text(after(page, `id="history">`))
	if want := "rollout 1.0.0 (" + shortDigest(dg(10)) + ") 1.1.0 (" + shortDigest(dg(11)) + ") alice"; !strings.Contains(hist, want) || !strings.Contains(hist, "Complete") || !strings.Contains(hist, "edge-3: Refused (no trusted key verifies it)") {
		t.Errorf("history %q lacks %q", hist, want)
	}

	// No CSRF token, or from another site: refused, nothing asked.
	form := strings.NewReader("")
	if resp, body := do(t, e.c, http.MethodPost, e.base+"/fleet/placements/web-prod/rollback", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); resp.StatusCode != http.StatusForbidden || strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Errorf("rollback without the token: %s %q", resp.Status, body)
	}
	if resp, _ := do(t, e.c, http.MethodPost, e.base+"/fleet/placements/web-prod/rollback", strings.NewReader("csrf="+url.QueryEscape(csrf(t, page))),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("rollback from another site: %s", resp.Status)
	}
	if p := e.placement(t, "web-prod"); p.Spec.Channel != "stable" || p.Spec.Digest != "" {
		t.Fatalf("refused requests rolled back: %+v", p.Spec)
	}

	// With it: the centre is asked as the kubeconfig's user, the page
	// says so in one line.
	resp, _ := post(t, e, "/fleet/placements/web-prod/rollback", page, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/fleet/placements/web-prod" {
		t.Fatalf("rollback: %s → %q", resp.Status, resp.Header.Get("Location"))
	}
	if p := e.placement(t, "web-prod"); p.Spec.Digest != dg(10) || p.Spec.Channel != "" || p.Annotations[centre.AnnotationBy] != "kubernetes-admin" {
		t.Errorf("after the rollback: %+v %v", p.Spec, p.Annotations)
	}
	_, page = get(t, e, "/fleet/placements/web-prod")
	if want := "rollback asked by kubernetes-admin: placement web-prod is pinned to " + shortDigest(dg(10)); !strings.Contains(page, `<p class="notice" id="notice">`+want) {
		t.Errorf("after the rollback the page lacks %q:\n%s", want, text(page))
	}
	if !strings.Contains(text(page), "Track web , pinned to 1.0.0 ("+shortDigest(dg(10))+")") {
		t.Errorf("the placement is not shown pinned:\n%s", text(page))
	}
	// The notice is shown once.
	if _, page = get(t, e, "/fleet/placements/web-prod"); strings.Contains(page, `id="notice"`) {
		t.Error("the notice is shown again")
	}
	// The centre refuses (no earlier version): one line, 422.
	resp, body := post(t, e, "/fleet/placements/web-sea/rollback", page, nil)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `<p class="error" id="error">rollback: placement web-sea has no earlier version to roll back to</p>`) {
		t.Errorf("a rollback the centre refuses: %s\n%s", resp.Status, text(body))
	}
	if !strings.Contains(body, `id="rollback-btn" disabled`) {
		t.Error("the rollback button of a placement with no previous version is not disabled")
	}
	// A placement that does not exist.
	if status, page := get(t, e, "/fleet/placements/nope"); status != http.StatusNotFound || !strings.Contains(page, `id="error">placement nope in namespace ferry-fleet: `) {
		t.Errorf("an unknown placement: %d %s", status, text(page))
	}
}

func TestFleetTrackAndPromote(t *testing.T) {
	e := startFleet(t, true, fleetObjects()...)
	e.login(t, "alice-token")
	status, page := get(t, e, "/fleet/tracks/web")
	if status != http.StatusOK {
		t.Fatalf("track: %d\n%s", status, text(page))
	}
	for _, want := range []string{"Repository apps/web Placements web-prod web-sea", "stable 1.1.0 " + shortDigest(dg(11)), "beta 1.2.0-rc.1",
		"stable 1.1.0 " + shortDigest(dg(11)) + " copy alice"} {
		if !strings.Contains(text(page), want) {
			t.Errorf("the track page lacks %q:\n%s", want, text(page))
		}
	}
	for name, tc := range map[string]struct {
		form url.Values
		want string
	}{
		"bad channel": {url.Values{"channel": {"Stable!"}, "ref": {"1.2.0"}}, `promote: channel &#34;Stable!&#34; is not a channel&#39;s name`},
		"no ref":      {url.Values{"channel": {"stable"}, "ref": {" "}}, "promote: name the version by its digest"},
	} {
		resp, body := post(t, e, "/fleet/tracks/web/promote", page, tc.form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s\n%s", name, resp.Status, text(body))
		}
	}
	// The centre refuses: the form keeps what was typed.
	resp, body := post(t, e, "/fleet/tracks/web/promote", page, url.Values{"channel": {"stable"}, "ref": {"9.9.9"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "promote: tag 9.9.9 is not in repository apps/web") || !strings.Contains(body, `id="ref" required size="50" value="9.9.9"`) {
		t.Errorf("a tag the registry lacks: %s\n%s", resp.Status, text(body))
	}
	resp, _ = post(t, e, "/fleet/tracks/web/promote", page, url.Values{"channel": {"stable"}, "ref": {"1.2.0"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("promote: %s", resp.Status)
	}
	if c := e.called(); !slices.Equal(c, []string{"promote web stable 9.9.9 by alice", "promote web stable 1.2.0 by alice"}) {
		t.Errorf("the centre was asked %q", c)
	}
	_, page = get(t, e, "/fleet/tracks/web")
	if want := "promoted by alice: channel stable of web is 1.2.0 (" + shortDigest(dg(13)) + ")"; !strings.Contains(text(page), want) {
		t.Errorf("after promoting, the page lacks %q:\n%s", want, text(page))
	}
	if got := rowOf(t, page, "stable"); !strings.HasPrefix(got, "stable 1.2.0 "+shortDigest(dg(13))) {
		t.Errorf("the stable channel after promoting: %q", got)
	}
	// Not logged in: nothing.
	e2 := startFleet(t, true, fleetObjects()...)
	if resp, _ := do(t, e2.c, http.MethodGet, e2.base+"/fleet/tracks/web", nil, nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Errorf("the track page before a login: %s", resp.Status)
	}
}

// A user RBAC lets read placements but not list members nor change
// anything: each page or action it may not is one line, with the API
// server's 403.
func TestFleetViewer(t *testing.T) {
	e := startFleet(t, true, fleetObjects()...)
	e.useCentre(t)
	e.login(t, "viewer-token")
	status, page := get(t, e, "/fleet")
	if status != http.StatusForbidden || !strings.Contains(page, `<p class="error" id="error">list the members in namespace ferry-fleet: members.fleet.ferry.dev is forbidden: User &#34;viewer&#34; cannot list resource &#34;members&#34;`) {
		t.Errorf("members as a viewer: %d\n%s", status, text(page))
	}
	if strings.Count(text(page[strings.Index(page, `id="error"`):]), "forbidden") != 1 {
		t.Error("the refusal is not one line")
	}
	if status, page := get(t, e, "/fleet/matrix"); status != http.StatusForbidden || !strings.Contains(page, `id="error">list the members`) {
		t.Errorf("matrix as a viewer: %d\n%s", status, text(page))
	}
	status, page = get(t, e, "/fleet/placements/web-prod")
	if status != http.StatusOK || !strings.Contains(text(page), "Phase Halted, wave 1") {
		t.Fatalf("a placement as a viewer: %d\n%s", status, text(page))
	}
	resp, body := post(t, e, "/fleet/placements/web-prod/rollback", page, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `id="error">rollback: placements.fleet.ferry.dev is forbidden: User &#34;viewer&#34; cannot update resource &#34;placements&#34;`) {
		t.Errorf("a viewer's rollback: %s\n%s", resp.Status, text(body))
	}
	if p := e.placement(t, "web-prod"); p.Spec.Digest != "" {
		t.Errorf("a viewer's rollback changed the placement: %q", p.Spec.Digest)
	}
}

// multipartReport is a form with the report file, and its content type.
func multipartReport(t *testing.T, data []byte) (io.Reader, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("report", "site-report.json")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(data)
	_ = mw.Close()
	return &buf, mw.FormDataContentType()
}

func TestFleetCarriedMember(t *testing.T) {
	e := startFleet(t, false, fleetObjects()...)
	e.srv.maxReport = 1 << 10
	if e2 := startFleet(t, false); e2.srv.maxReport != wire.MaxReportFile {
		t.Errorf("the report's bound is %d, not wire.MaxReportFile", e2.srv.maxReport)
	}
	status, page := get(t, e, "/fleet/members/ship-1")
	if status != http.StatusOK {
		t.Fatalf("member: %d\n%s", status, text(page))
	}
	for _, want := range []string{"Member ship-1 Carried True", "Labels env=sea", "Last seen 3d ago", "Receipt " + shortDigest(dg(99)) + " copy 12 blobs, 345.0 MiB",
		"web web-sea 1.0.0", "Desired state Package Placement Version Repository Carry it web web-sea 1.0.0 (" + shortDigest(dg(10)) + ") apps/web Download the bundle and its values"} {
		if !strings.Contains(text(page), want) {
			t.Errorf("the member page lacks %q:\n%s", want, text(page))
		}
	}
	// A connected member has no bundle to download.
	if _, p := get(t, e, "/fleet/members/edge-3"); strings.Contains(p, "Download the bundle") || !strings.Contains(text(p), "web web-prod 1.1.0 ("+shortDigest(dg(11))+") apps/web") {
		t.Errorf("a connected member's page:\n%s", text(p))
	}

	// The bundle: a POST with the token, sent as a file, then gone.
	if resp, _ := do(t, e.c, http.MethodPost, e.base+"/fleet/members/ship-1/bundle", strings.NewReader("package=web"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a bundle without the token: %s", resp.Status)
	}
	resp, body := post(t, e, "/fleet/members/ship-1/bundle", page, url.Values{"package": {"web"}})
	if resp.StatusCode != http.StatusOK || body != fakeBundle || resp.Header.Get("Content-Disposition") != `attachment; filename="ship-1-web.tar.zst"` || resp.Header.Get("Content-Length") != fmt.Sprint(len(fakeBundle)) {
		t.Errorf("bundle: %s %q %q", resp.Status, resp.Header.Get("Content-Disposition"), body)
	}
	if left, _ := os.ReadDir(e.spool); len(left) != 0 {
		t.Errorf("the spool keeps %v after the bundle was sent", left)
	}
	// Its values, for the person deploying it.
	resp, body = do(t, e.c, http.MethodGet, e.base+"/fleet/members/ship-1/values?package=web", nil, nil)
	if resp.StatusCode != http.StatusOK || body != "{\"replicas\":1}\n" || resp.Header.Get("Content-Disposition") != `attachment; filename="ship-1-web.tar.zst.values.json"` {
		t.Errorf("values: %s %q %q", resp.Status, resp.Header.Get("Content-Disposition"), body)
	}
	if resp, body := do(t, e.c, http.MethodGet, e.base+"/fleet/members/edge-1/values?package=web", nil, map[string]string{"Accept": "text/html"}); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `id="error">values of web: member edge-1 is given no values for package &#34;web&#34;`) {
		t.Errorf("no values: %s\n%s", resp.Status, text(body))
	}
	resp, body = post(t, e, "/fleet/members/ship-1/bundle", page, url.Values{"package": {"db"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `id="error">bundle of db: package db is not placed on member ship-1</p>`) {
		t.Errorf("a bundle the centre refuses: %s\n%s", resp.Status, text(body))
	}

	// The report: multipart, the token in the query.
	importURL := e.base + "/fleet/import?from=ship-1&csrf=" + url.QueryEscape(csrf(t, page))
	form, ct := multipartReport(t, []byte("signed report of ship-1"))
	if resp, _ := do(t, e.c, http.MethodPost, e.base+"/fleet/import?from=ship-1", form, map[string]string{"Content-Type": ct}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an import without the token: %s", resp.Status)
	}
	form, ct = multipartReport(t, []byte("signed report of ship-1"))
	resp, _ = do(t, e.c, http.MethodPost, importURL, form, map[string]string{"Content-Type": ct})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/fleet/members/ship-1" {
		t.Fatalf("import: %s", resp.Status)
	}
	if _, p := get(t, e, "/fleet/members/ship-1"); !strings.Contains(p, `id="notice">imported the report of ship-1 (1 packages, Ready True, made 3d ago)</p>`) {
		t.Errorf("after the import:\n%s", text(p))
	}
	for name, tc := range map[string]struct {
		data   []byte
		status int
		want   string
	}{
		"forged":  {[]byte("signed report of ship-2"), http.StatusUnprocessableEntity, "import: the report&#39;s signature does not verify with member ship-1&#39;s key"},
		"empty":   {nil, http.StatusBadRequest, "import: the report file is empty"},
		"too big": {bytes.Repeat([]byte("x"), 1<<10+1), http.StatusRequestEntityTooLarge, "import: the report is larger than 1.0 KiB"},
	} {
		form, ct := multipartReport(t, tc.data)
		resp, body := do(t, e.c, http.MethodPost, importURL, form, map[string]string{"Content-Type": ct})
		if resp.StatusCode != tc.status || !strings.Contains(body, `id="error">`+tc.want) || !strings.Contains(body, "Member ship-1") {
			t.Errorf("%s: %s\n%s", name, resp.Status, text(body))
		}
	}
	// From the members page, not multipart: back to the members page.
	resp, body = do(t, e.c, http.MethodPost, e.base+"/fleet/import?csrf="+url.QueryEscape(csrf(t, page)), strings.NewReader("x"), map[string]string{"Content-Type": "text/plain"})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="error">import: send the report as a form&#39;s file (multipart/form-data)</p>`) || !strings.Contains(body, `id="counts"`) {
		t.Errorf("not a form: %s\n%s", resp.Status, text(body))
	}
	if c := e.called(); len(c) != 4 || c[2] != "import 23 bytes" {
		t.Errorf("the centre was asked %q", c)
	}
}

// Without FleetOptions there are no fleet pages.
func TestFleetOff(t *testing.T) {
	base, c, _ := start(t, false)
	if resp, _ := do(t, c, http.MethodGet, base+"/fleet", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/fleet without the fleet: %s", resp.Status)
	}
	if _, page := do(t, c, http.MethodGet, base+"/c/lab/upload", nil, nil); strings.Contains(page, "nav-fleet") {
		t.Error("the nav links the fleet")
	}
}

// A management cluster without the fleet's API says so.
func TestFleetNoAPI(t *testing.T) {
	e := startFleet(t, false)
	e.srv.fleetClient = func(*rest.Config) (client.WithWatch, error) {
		return newFakeFleetWithout(), nil
	}
	status, page := get(t, e, "/fleet")
	if status != http.StatusNotFound || !strings.Contains(page, "list the members: the cluster centre has no fleet API (fleet.ferry.dev/v1alpha1)") {
		t.Errorf("no fleet API: %d\n%s", status, text(page))
	}
}
