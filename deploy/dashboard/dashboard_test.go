package dashboard

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// unreachable is a cluster whose API server does not answer: the pages
// that need it say so in one line, the rest of the dashboard works.
func unreachable() Cluster {
	return Cluster{Name: "lab", Config: &rest.Config{Host: "https://127.0.0.1:1", Timeout: 2 * time.Second}}
}

// start serves a dashboard on loopback and returns its URL and a browser:
// a client with a cookie jar that follows no redirects.
func start(t *testing.T, login bool) (string, *http.Client, *Server) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Clusters: []Cluster{unreachable()}, Namespace: "ferry", Hosts: HostsFor(ts.Listener.Addr().String()), Login: login})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return ts.URL, c, srv
}

func do(t testing.TB, c *http.Client, method, u string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// csrf reads the session's CSRF token from a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfMeta.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

func TestSecurityHeadersAndHost(t *testing.T) {
	base, c, _ := start(t, false)
	resp, page := do(t, c, http.MethodGet, base+"/c/lab/upload", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload page: %s\n%s", resp.Status, page)
	}
	for h, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'; script-src 'self'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-store",
	} {
		if got := resp.Header.Get(h); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, " on") && regexp.MustCompile(`\son[a-z]+=`).MatchString(page) {
		t.Error("the page has inline script, which the CSP would block")
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie: %+v", ck)
	}
	// DNS rebinding: a name the dashboard is not published under.
	resp, body := do(t, c, http.MethodGet, base+"/", nil, map[string]string{"Host": "attacker.example:80"})
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "attacker.example") {
		t.Errorf("foreign Host: %s %q", resp.Status, body)
	}
	// A Host of half what the server reads of the headers is named in short.
	long := strings.Repeat("a", 512<<10)
	resp, body = do(t, c, http.MethodGet, base+"/", nil, map[string]string{"Host": long + ".example"})
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "does not answer to host") || strings.Contains(body, long[:200]) {
		t.Errorf("long foreign Host: %s, %d bytes of body", resp.Status, len(body))
	}
	if resp, _ := do(t, c, http.MethodGet, base+"/static/app.js", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Errorf("app.js: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
}

// Every state-changing request needs the session's token, and no
// cross-site request passes even with it.
func TestCSRF(t *testing.T) {
	base, c, _ := start(t, false)
	_, page := do(t, c, http.MethodGet, base+"/c/lab/upload", nil, nil)
	token := csrf(t, page)
	form := func(v url.Values) io.Reader { return strings.NewReader(v.Encode()) }
	formType := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

	for name, tc := range map[string]struct {
		path string
		body io.Reader
		hdr  map[string]string
	}{
		"no token":       {"/c/lab/registry/usage", form(url.Values{}), formType},
		"wrong token":    {"/c/lab/registry/usage", form(url.Values{"csrf": {"x" + token}}), formType},
		"upload, none":   {"/c/lab/upload", strings.NewReader("archive"), nil},
		"inspect, wrong": {"/c/lab/inspect", strings.NewReader("archive"), map[string]string{"X-CSRF-Token": token[1:]}},
		"cross-site":     {"/c/lab/upload", strings.NewReader("archive"), map[string]string{"X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site"}},
		"other origin":   {"/logout", form(url.Values{"csrf": {token}}), map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://attacker.example"}},
	} {
		resp, body := do(t, c, http.MethodPost, base+tc.path, tc.body, tc.hdr)
		if resp.StatusCode != http.StatusForbidden || strings.Count(strings.TrimSpace(body), "\n") != 0 {
			t.Errorf("%s: %s %q, want a one-line 403", name, resp.Status, body)
		}
	}
	// Another browser's token is not this one's.
	jar2, _ := cookiejar.New(nil)
	c2 := &http.Client{Jar: jar2, CheckRedirect: c.CheckRedirect}
	if resp, _ := do(t, c2, http.MethodPost, base+"/c/lab/inspect", strings.NewReader("x"), map[string]string{"X-CSRF-Token": token}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("another session's token: %s", resp.Status)
	}
	// With it: the request is served (not a package: said in one line).
	resp, body := do(t, c, http.MethodPost, base+"/c/lab/inspect?name=junk.tar", strings.NewReader("not an archive"), map[string]string{"X-CSRF-Token": token})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "not a ferry package") || !strings.Contains(body, "junk.tar") || strings.Contains(body, "ferry-dashboard-") {
		t.Errorf("inspect with the token: %s\n%s", resp.Status, body)
	}
	if resp, _ := do(t, c, http.MethodPost, base+"/logout", form(url.Values{"csrf": {token}}), formType); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout with the token: %s", resp.Status)
	}
}

// Off loopback, nothing is served before a login; a login without the
// pre-login session's token, or with no token, is refused.
func TestLoginRequired(t *testing.T) {
	base, c, _ := start(t, true)
	for _, p := range []string{"/", "/c/lab/registry", "/c/lab/packages/ferry/x", "/c/lab/upload"} {
		resp, _ := do(t, c, http.MethodGet, base+p, nil, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
			t.Errorf("GET %s before login: %s → %q", p, resp.Status, resp.Header.Get("Location"))
		}
	}
	_, page := do(t, c, http.MethodGet, base+"/login", nil, nil)
	token := csrf(t, page)
	if resp, body := do(t, c, http.MethodPost, base+"/c/lab/upload", strings.NewReader("x"), map[string]string{"X-CSRF-Token": token}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("upload before login: %s %q", resp.Status, body)
	}
	formType := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if resp, _ := do(t, c, http.MethodPost, base+"/login", strings.NewReader("token=abc"), formType); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login without the CSRF token: %s", resp.Status)
	}
	resp, body := do(t, c, http.MethodPost, base+"/login", strings.NewReader(url.Values{"csrf": {token}, "token": {" "}}.Encode()), formType)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "paste a Kubernetes bearer token") {
		t.Errorf("login with no token: %s", resp.Status)
	}
	// A token the dashboard cannot check (the API server does not answer)
	// is not taken.
	resp, body = do(t, c, http.MethodPost, base+"/login", strings.NewReader(url.Values{"csrf": {token}, "token": {"abc"}}.Encode()), formType)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "token review") {
		t.Errorf("login the cluster cannot check: %s", resp.Status)
	}
	if resp, _ := do(t, c, http.MethodGet, base+"/", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after a refused login: %s", resp.Status)
	}
}

// A cluster that does not answer is one line on the page, not a failure
// of the page.
func TestUnreachableCluster(t *testing.T) {
	base, c, _ := start(t, false)
	resp, page := do(t, c, http.MethodGet, base+"/", nil, map[string]string{"Accept": "text/html"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `class="error"`) || !strings.Contains(page, "127.0.0.1:1") {
		t.Fatalf("packages page of an unreachable cluster: %s\n%s", resp.Status, page)
	}
	resp, page = do(t, c, http.MethodGet, base+"/c/nope/registry", nil, map[string]string{"Accept": "text/html"})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(page, `no cluster &#34;nope&#34;`) {
		t.Fatalf("unknown cluster: %s\n%s", resp.Status, page)
	}
}

func TestHostsFor(t *testing.T) {
	got := HostsFor("127.0.0.1:8480")
	for _, want := range []string{"127.0.0.1:8480", "localhost:8480", "[::1]:8480"} {
		if !strings.Contains(strings.Join(got, " "), want) {
			t.Errorf("HostsFor loopback: %v lacks %s", got, want)
		}
	}
	got = HostsFor("0.0.0.0:8443", "Ferry.Example.Internal", "10.1.2.3:443")
	if strings.Contains(strings.Join(got, " "), "localhost") || !strings.Contains(strings.Join(got, " "), "ferry.example.internal:8443") || !strings.Contains(strings.Join(got, " "), "10.1.2.3:443") {
		t.Errorf("HostsFor published: %v", got)
	}
	if Loopback("0.0.0.0:1") || !Loopback("127.0.0.2:1") || !Loopback("localhost:1") {
		t.Error("Loopback")
	}
}

// BenchmarkPackagesPage renders the packages page of 50 Packages (the
// template alone; the e2e BenchmarkDashboard times whole pages on a
// cluster).
func BenchmarkPackagesPage(b *testing.B) {
	srv, err := New(Options{Clusters: []Cluster{unreachable()}, Namespace: "ferry", Hosts: []string{"x"}})
	if err != nil {
		b.Fatal(err)
	}
	v := &packagesView{view: view{Title: "Packages", Clusters: []string{"lab"}, Cluster: "lab"}}
	sec := clusterPackages{Cluster: "lab", Scope: "all namespaces"}
	for i := range 50 {
		p := &v1alpha1.Package{}
		p.Namespace, p.Name = "ferry", fmt.Sprintf("pkg-%02d", i)
		p.Spec.Keys = []v1alpha1.KeyReference{{Name: "ferry-key-1"}}
		p.Status = v1alpha1.PackageStatus{Version: "1.0.0", Digest: "sha256:" + strings.Repeat("ab", 32), SignedBy: []string{"Secret/ferry-key-1/cosign.pub"},
			Conditions: []metav1.Condition{{Type: v1alpha1.Ready, Status: metav1.ConditionTrue, Reason: "Ready"}},
			Releases:   []v1alpha1.ReleaseStatus{{Namespace: "app", Name: "app", Chart: "app-1.0.0", Revision: 3}},
			Images:     []string{"library/nginx@sha256:" + strings.Repeat("cd", 32), "library/redis@sha256:" + strings.Repeat("ef", 32)}}
		sec.Packages = append(sec.Packages, newRow("lab", p))
	}
	v.Sections = []clusterPackages{sec}
	b.ReportAllocs()
	for b.Loop() {
		if err := srv.pages["packages"].ExecuteTemplate(io.Discard, "layout", v); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPackagePageImagePolicies: the package page shows the image
// signature policies of the Package status.
func TestPackagePageImagePolicies(t *testing.T) {
	srv, err := New(Options{Clusters: []Cluster{unreachable()}, Namespace: "ferry", Hosts: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	fp := "key sha256:" + strings.Repeat("ab", 32)
	p := &v1alpha1.Package{}
	p.Namespace, p.Name = "ferry", "demo"
	p.Status = v1alpha1.PackageStatus{Version: "1.0.0", ImagePolicies: []v1alpha1.ImagePolicyStatus{
		{Name: "publisher", Required: true, Authorities: []string{fp}, Attestations: []string{"https://slsa.dev/provenance/v1"}, Images: []string{"docker.io/library/app:1.0"}},
	}}
	var buf strings.Builder
	v := &packageView{view: view{Title: "demo", Clusters: []string{"lab"}, Cluster: "lab"}, Pkg: newRow("lab", p)}
	if err := srv.pages["package"].ExecuteTemplate(&buf, "layout", v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="image-policies"`, "<td>publisher</td>", "required; attestations https://slsa.dev/provenance/v1", "<code>" + fp + "</code>", "docker.io/library/app:1.0"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// None: no section.
	buf.Reset()
	v.Pkg = newRow("lab", &v1alpha1.Package{})
	if err := srv.pages["package"].ExecuteTemplate(&buf, "layout", v); err != nil || strings.Contains(buf.String(), "image-policies") {
		t.Fatalf("a package without policies: %v", err)
	}
}
