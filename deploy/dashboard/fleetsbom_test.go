package dashboard

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// fleetSBOMs is a centre's registry holding real packages: audit 1.0.0
// (an image linking golang.org/x/net at v0.11.0, affected by
// GO-2023-1988), audit 2.0.0 (the same at v0.39.0, fixed), and vulns
// 1.0.0 carrying the Go vulnerability database's records of
// golang.org/x/net; a way to it that refuses every write, as the
// dashboard's registry flags may.
type fleetSBOMs struct {
	host, roHost string
	v1, v2, db   string // root digests
	writes       atomic.Int32
}

func newFleetSBOMs(t testing.TB) *fleetSBOMs {
	t.Helper()
	ctx := context.Background()
	f := &fleetSBOMs{host: registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))}
	push := func(path, ref string) string {
		r, err := artifact.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Push(ctx, r, f.host+"/"+ref, artifact.PushOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}}); err != nil {
			t.Fatal(err)
		}
		return r.Root().Digest.String()
	}
	f.v1 = push(bomscantest.Package(t, "audit", "1.0.0",
		bomscantest.Image{Ref: affectedRef, Platforms: []string{"linux/amd64"}, Program: bomscantest.GoProgram(t, "golang.org/x/net", "golang.org/x/net/html", "v0.11.0")}), "apps/audit:1.0.0")
	f.v2 = push(bomscantest.Package(t, "audit", "2.0.0",
		bomscantest.Image{Ref: fixedRef, Platforms: []string{"linux/amd64"}, Program: bomscantest.GoProgram(t, "golang.org/x/net", "golang.org/x/net/html", "v0.39.0")}), "apps/audit:2.0.0")
	f.db = push(vulnsPackage(t), "vulns:1.0.0")
	target, _ := url.Parse("http://" + f.host)
	proxy := httputil.NewSingleHostReverseProxy(target)
	ro := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			f.writes.Add(1)
			http.Error(w, `{"errors":[{"code":"DENIED","message":"read only"}]}`, http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ro.Close)
	f.roHost = strings.TrimPrefix(ro.URL, "http://")
	return f
}

// objects are the fleet's: track audit (stable at 2.0.0, 1.0.0 promoted
// before), members edge-1 and ship-1 running 1.0.0 and edge-2 running
// 2.0.0; withDB, track vulns whose stable channel is the database.
func (f *fleetSBOMs) objects(withDB bool) []client.Object {
	member := func(name, mode, digest, version string) *fleetv1.Member {
		m := &fleetv1.Member{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: name}, Spec: fleetv1.MemberSpec{Mode: mode}}
		m.Status.Packages = []fleetv1.MemberPackage{{Name: "audit", Version: version, Digest: digest, Ready: true}}
		return m
	}
	objs := []client.Object{
		member("edge-1", fleetv1.Connected, f.v1, "1.0.0"), member("edge-2", fleetv1.Connected, f.v2, "2.0.0"), member("ship-1", fleetv1.Carried, f.v1, "1.0.0"),
		&fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "audit"},
			Spec:   fleetv1.ReleaseTrackSpec{Repository: "apps/audit", Channels: []fleetv1.Channel{{Name: "stable", Digest: f.v2, Version: "2.0.0"}}},
			Status: fleetv1.ReleaseTrackStatus{Promotions: []fleetv1.Promotion{{Channel: "stable", Digest: f.v2, Version: "2.0.0"}, {Channel: "stable", Digest: f.v1, Version: "1.0.0"}}}},
	}
	if withDB {
		objs = append(objs, &fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "vulns"},
			Spec: fleetv1.ReleaseTrackSpec{Repository: "vulns", Channels: []fleetv1.Channel{{Name: "stable", Digest: f.db, Version: "1.0.0"}}}})
	}
	return objs
}

// serve is a dashboard with the fleet pages over objs, reaching the
// centre's registry by the read-only way; with login, viewer-token is a
// user RBAC lets only read (viewerOf).
func (f *fleetSBOMs) serve(t testing.TB, login bool, maxAge time.Duration, objs ...client.Object) *fleetEnv {
	t.Helper()
	e := &fleetEnv{cl: newFakeFleet(objs...), spool: t.TempDir()}
	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Clusters: []Cluster{{Name: "centre", Config: fakeKube(t)}}, Namespace: "ferry", AdvisoryMaxAge: maxAge,
		Hosts: HostsFor(ts.Listener.Addr().String()), Login: login,
		Fleet: &FleetOptions{Namespace: fleetNS, Spool: e.spool, Registry: f.roHost, Remote: artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(f.roHost, auth.EmptyCredential)}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.fleetClient = func(cfg *rest.Config) (client.WithWatch, error) {
		if cfg.BearerToken == "viewer-token" {
			return viewerOf(e.cl), nil
		}
		return e.cl, nil
	}
	srv.fleetActions = func(cl client.WithWatch) fleetActions { return &fakeActions{cl: cl, mu: &e.mu, calls: &e.calls} }
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(func() { _ = srv.Close() })
	jar, _ := cookiejar.New(nil)
	e.base, e.srv = ts.URL, srv
	e.c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

func (e *fleetEnv) get(t testing.TB, path string, want int) string {
	t.Helper()
	resp, page := do(t, e.c, http.MethodGet, e.base+path, nil, nil)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d\n%.3000s", path, resp.Status, want, page)
	}
	return page
}

// The fleet's search and findings over real SBOMs in a real registry: a
// version range names the version the affected image is in and the
// members that run it; findings by package version and by member, with
// their totals; the database's date, old past --advisory-max-age; no
// database: how to carry one. The registry refuses the dashboard's
// writes: the index is not saved, and the pages answer. A viewer who may
// not list members is told so in one line (403), and writes nothing.
func TestFleetSBOM(t *testing.T) {
	f := newFleetSBOMs(t)
	e := f.serve(t, true, time.Hour, f.objects(true)...)
	e.login(t, "alice-token")

	page := e.get(t, "/fleet/sbom/search?q="+url.QueryEscape("pkg:golang/golang.org/x/net@<0.13.0"), http.StatusOK)
	rows := hitRows(page)
	if len(rows) != 1 || rows[0][0] != "audit" || rows[0][1] != "1.0.0" || rows[0][2] != affectedRef || rows[0][5] != "v0.11.0" ||
		!strings.Contains(rows[0][7], "member edge-1") || !strings.Contains(rows[0][7], "member ship-1") || strings.Contains(rows[0][7], "edge-2") {
		t.Fatalf("x/net below 0.13.0 across the fleet: %q\n%.3000s", rows, page)
	}
	if !strings.Contains(page, `href="/fleet/sbom/search" id="fleetnav-search"`) || !strings.Contains(page, `href="/fleet/sbom/audit" id="fleetnav-audit"`) {
		t.Error("the fleet's nav does not link the SBOM pages")
	}
	rows = hitRows(e.get(t, "/fleet/sbom/search?q=golang.org/x/net", http.StatusOK))
	if len(rows) != 2 || rows[1][1] != "2.0.0" || !strings.Contains(rows[1][7], "member edge-2") {
		t.Errorf("x/net by name: %q", rows)
	}
	if p := e.get(t, "/fleet/sbom/search?q="+url.QueryEscape("pkg:golang/x@<<1"), http.StatusOK); !strings.Contains(p, `id="search-error">`) || strings.Contains(p, `id="hits"`) {
		t.Errorf("a wrong query:\n%.2000s", p)
	}

	page = e.get(t, "/fleet/sbom/audit", http.StatusOK)
	if !strings.Contains(imageSection(page, affectedRef), "GO-2023-1988") || strings.Contains(imageSection(page, fixedRef), "GO-2023-1988") {
		t.Errorf("the findings by package version:\n%.4000s", page)
	}
	// By member: each counts the findings of the version it runs, as
	// that version's section does.
	members := rowsOf(page[strings.Index(page, `id="members"`):])
	sectionCount := func(version string) string {
		m := regexp.MustCompile(`<small>` + regexp.QuoteMeta(version) + ` · (\d+) findings</small>`).FindStringSubmatch(page)
		if m == nil {
			return "none"
		}
		return m[1]
	}
	if len(members) != 3 || !strings.Contains(members[0][0], ">edge-1</a>") || !strings.Contains(members[1][0], ">ship-1</a>") || !strings.Contains(members[2][0], ">edge-2</a>") ||
		members[0][1] != sectionCount("1.0.0") || members[1][1] != sectionCount("1.0.0") || members[2][1] != sectionCount("2.0.0") ||
		members[0][3] != "audit 1.0.0" || members[2][3] != "audit 2.0.0" {
		t.Errorf("the findings by member: %q", members)
	}
	if !strings.Contains(page, "package versions, on 3 members") {
		t.Errorf("the totals:\n%.3000s", page)
	}
	if !strings.Contains(page, `class="facts db stale-db"`) || !strings.Contains(page, `id="db-old"`) || !strings.Contains(page, "older than 1 hour:") {
		t.Errorf("an old database is not shown as such:\n%.3000s", page)
	}

	if f.writes.Load() == 0 {
		t.Error("the dashboard never tried to save the index (so the read-only case is not tested)")
	}
	reg, err := remote.NewRegistry(f.host)
	if err != nil {
		t.Fatal(err)
	}
	reg.PlainHTTP = true
	if repo, err := reg.Repository(context.Background(), bomscan.FleetIndexRepository); err == nil {
		if _, err := repo.Resolve(context.Background(), bomscan.IndexTag); err == nil {
			t.Error("the index was saved through a way that refuses writes")
		}
	}

	// A viewer may not list the members: one line, the API server's 403.
	writes := f.writes.Load()
	v := f.serve(t, true, 0, f.objects(true)...)
	v.login(t, "viewer-token")
	if p := v.get(t, "/fleet/sbom/search?q=golang.org/x/net", http.StatusForbidden); !strings.Contains(p, `id="search-error">`) || !strings.Contains(p, "members") {
		t.Errorf("a viewer's search:\n%.2000s", p)
	}
	if f.writes.Load() != writes {
		t.Error("a viewer's search tried to write")
	}

	// A database within its age is not old.
	if p := f.serve(t, false, 100*365*24*time.Hour, f.objects(true)...).get(t, "/fleet/sbom/audit", http.StatusOK); strings.Contains(p, "stale-db") || !strings.Contains(p, `id="db-date"`) {
		t.Errorf("a database within its age:\n%.2000s", p)
	}
	// No track holds one: how to carry one; the search still answers.
	n := f.serve(t, false, 0, f.objects(false)...)
	if p := n.get(t, "/fleet/sbom/audit", http.StatusOK); !strings.Contains(p, `id="nodb"`) || !strings.Contains(p, "advisories:") || !strings.Contains(p, "ferry fleet promote") {
		t.Errorf("no database:\n%.2000s", p)
	}
	if rows := hitRows(n.get(t, "/fleet/sbom/search?q=golang.org/x/net", http.StatusOK)); len(rows) != 2 {
		t.Errorf("the search without a database: %q", rows)
	}
}
