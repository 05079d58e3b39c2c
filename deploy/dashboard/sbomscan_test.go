package dashboard

import (
	"bytes"
	"context"
	"html"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// Two images whose programs link golang.org/x/net at an affected and at a
// fixed version of GO-2023-1988 (x/net/html, fixed in 0.13.0).
const (
	affectedRef = "example.com/org/affected:1.0"
	fixedRef    = "example.com/org/fixed:1.0"
	// vulndbVersion is the golang.org/x/vulndb whose records (data/osv,
	// the Go vulnerability database) the findings tests carry.
	vulndbVersion = "v0.0.0-20261105234957-e22db6528018"
)

// clusterEnv is a dashboard over a cluster: Package ferry/audit (the two
// images, SBOMs by the real helper) in an in-process registry the
// dashboard may only read, a Pod running the affected image, and perhaps
// Package ferry/vulns carrying the Go vulnerability database's records of
// golang.org/x/net.
type clusterEnv struct {
	base   string
	c      *http.Client
	srv    *Server
	reg    *remote.Registry // the registry itself, writable
	cfg    *artifact.Config // ferry/audit's
	writes atomic.Int32     // write requests the dashboard's way refused
}

func startCluster(t testing.TB, withDB bool, opts Options) *clusterEnv {
	t.Helper()
	ctx := context.Background()
	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	push := func(path, ref string) *artifact.Reader {
		r, err := artifact.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Push(ctx, r, host+"/"+ref, artifact.PushOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	audit := push(bomscantest.Package(t, "audit", "1.0.0",
		bomscantest.Image{Ref: affectedRef, Platforms: []string{"linux/amd64"}, Program: bomscantest.GoProgram(t, "golang.org/x/net", "golang.org/x/net/html", "v0.11.0")},
		bomscantest.Image{Ref: fixedRef, Platforms: []string{"linux/amd64"}, Program: bomscantest.GoProgram(t, "golang.org/x/net", "golang.org/x/net/html", "v0.39.0")},
	), "audit:1.0.0")
	pkg := func(name string, r *artifact.Reader) *v1alpha1.Package {
		p := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: name}, Spec: v1alpha1.PackageSpec{Repository: name}}
		p.Status.Digest, p.Status.Version = r.Root().Digest.String(), "1.0.0"
		return p
	}
	e := &clusterEnv{cfg: audit.Config()}
	var affectedDigest string
	for _, c := range e.cfg.Components {
		for _, img := range c.Images {
			if img.Ref == affectedRef {
				affectedDigest = img.Digest.String()
			}
		}
	}
	objs := []client.Object{pkg("audit", audit),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "affected-1"},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "127.0.0.1:31999/org/affected@" + affectedDigest}}}},
	}
	if withDB {
		objs = append(objs, pkg("vulns", push(vulnsPackage(t), "vulns:1.0.0")))
	}

	// The dashboard's way to the registry refuses every write, as the
	// registry does a viewer's.
	target, _ := url.Parse("http://" + host)
	proxy := httputil.NewSingleHostReverseProxy(target)
	ro := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			e.writes.Add(1)
			http.Error(w, `{"errors":[{"code":"DENIED","message":"read only"}]}`, http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ro.Close)
	roHost := strings.TrimPrefix(ro.URL, "http://")
	var err error
	if e.reg, err = remote.NewRegistry(host); err != nil {
		t.Fatal(err)
	}
	e.reg.PlainHTTP = true
	dashReg, err := remote.NewRegistry(roHost)
	if err != nil {
		t.Fatal(err)
	}
	dashReg.PlainHTTP = true

	ts := httptest.NewUnstartedServer(nil)
	opts.Clusters, opts.Namespace, opts.Hosts = []Cluster{unreachable()}, "ferry", HostsFor(ts.Listener.Addr().String())
	if e.srv, err = New(opts); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	e.srv.actors["lab\x00"] = &actor{cluster: "lab", cs: kubefake.NewClientset(),
		pc:  fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(),
		reg: dashReg, ep: &reach.Endpoint{Host: roHost, Via: reach.NodePort}}
	ts.Config.Handler = e.srv
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(func() { _ = e.srv.Close() })
	jar, _ := cookiejar.New(nil)
	e.c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	e.base = ts.URL
	return e
}

// vulnsPackage creates package vulns 1.0.0 carrying the Go vulnerability
// database's records that name golang.org/x/net, and returns its path.
func vulnsPackage(t testing.TB) string {
	t.Helper()
	mod, err := thirdparty.ModuleDir("golang.org/x/vulndb", vulndbVersion)
	if err != nil {
		t.Skipf("the Go vulnerability database: %v", err)
	}
	dir := t.TempDir()
	osv := filepath.Join(dir, "osv")
	if err := os.Mkdir(osv, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(mod, "data", "osv", "*.json"))
	if err != nil || len(files) < 1000 {
		t.Fatalf("the database's records: %d (%v)", len(files), err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"name": "golang.org/x/net"`)) || bytes.Contains(b, []byte(`"name":"golang.org/x/net"`)) {
			if err := os.WriteFile(filepath.Join(osv, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n < 10 {
		t.Fatalf("%d records of golang.org/x/net", n)
	}
	if err := os.WriteFile(filepath.Join(dir, definition.FileName), []byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: vulns, version: 1.0.0}\n"+
		"components:\n- name: db\n  advisories:\n  - source: osv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "vulns.tar")
	if _, err := build.Create(context.Background(), def, build.CreateOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *clusterEnv) get(t testing.TB, path string) string {
	t.Helper()
	resp, page := do(t, e.c, http.MethodGet, e.base+path, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, page)
	}
	return page
}

// Search over the cluster's SBOMs: a package URL and a version range
// names the affected image only, with its Package and the Pod that runs
// it, and links its SBOM; a name alone finds both; a wrong query and one
// of 4 KiB are one line on a 200 page. The registry refuses the
// dashboard's writes: the index is not saved, and the pages answer.
func TestSBOMSearch(t *testing.T) {
	e := startCluster(t, false, Options{})
	page := e.get(t, "/c/lab/sbom/search?q="+url.QueryEscape("pkg:golang/golang.org/x/net@<0.13.0"))
	rows := hitRows(page)
	if len(rows) != 1 || rows[0][2] != affectedRef || rows[0][3] != "linux/amd64" || rows[0][5] != "v0.11.0" || !strings.Contains(rows[0][7], "ferry/audit") || !strings.Contains(rows[0][7], "pod web/affected-1") {
		t.Fatalf("x/net below 0.13.0: %q\n%s", rows, page)
	}
	if !strings.Contains(page, `href="/c/lab/packages/ferry/audit/sboms/sha256:`) {
		t.Error("the hit does not link its SBOM")
	}
	if rows := hitRows(e.get(t, "/c/lab/sbom/search?q=golang.org/x/net")); len(rows) != 2 {
		t.Errorf("x/net by name: %q", rows)
	}
	for q, want := range map[string]string{
		"pkg:golang/x@<<1":        `id="search-error">`,
		strings.Repeat("x", 4096): `id="search-error">the query is 4096 bytes long; at most 1024<`,
	} {
		page := e.get(t, "/c/lab/sbom/search?q="+url.QueryEscape(q))
		if !strings.Contains(page, want) || strings.Contains(page, `id="hits"`) {
			t.Errorf("q=%.20q: the page lacks %s", q, want)
		}
	}
	if resp, _ := do(t, e.c, http.MethodGet, e.base+"/sbom/search?q=x", nil, nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/c/lab/sbom/search?q=x" {
		t.Errorf("/sbom/search: %s %s", resp.Status, resp.Header.Get("Location"))
	}
	if e.writes.Load() == 0 {
		t.Error("the dashboard never tried to save the index (so the read-only case is not tested)")
	}
	if _, err := e.reg.Repository(context.Background(), bomscan.IndexRepository); err == nil {
		repo, _ := e.reg.Repository(context.Background(), bomscan.IndexRepository)
		if _, err := repo.Resolve(context.Background(), bomscan.IndexTag); err == nil {
			t.Error("a viewer's session saved the index")
		}
	}
}

// hitRows are the search page's hits, each its cells' text.
func hitRows(page string) [][]string {
	i := strings.Index(page, `id="hits"`)
	if i < 0 {
		return nil
	}
	return rowsOf(page[i:])
}

// Findings against the Go vulnerability database deployed in the cluster:
// GO-2023-1988 names the image at x/net v0.11.0 with its fixed version,
// not the one at v0.39.0; per package and per image; the database's date,
// shown as old past --advisory-max-age; none deployed: how to carry one.
func TestSBOMAudit(t *testing.T) {
	e := startCluster(t, true, Options{AdvisoryMaxAge: time.Hour})
	page := e.get(t, "/c/lab/sbom/audit")
	affected, fixed := imageSection(page, affectedRef), imageSection(page, fixedRef)
	if !strings.Contains(affected, "GO-2023-1988") || !strings.Contains(affected, "v0.11.0") || !strings.Contains(affected, "0.13.0") {
		t.Errorf("the affected image's findings:\n%s", affected)
	}
	if strings.Contains(fixed, "GO-2023-1988") {
		t.Errorf("GO-2023-1988 names the image at the fixed version:\n%s", fixed)
	}
	if !strings.Contains(page, `class="facts db stale-db"`) || !strings.Contains(page, `id="db-old"`) || !strings.Contains(page, "older than 1 hour:") {
		t.Errorf("an old database is not shown as such:\n%.3000s", page)
	}
	if !strings.Contains(page, `id="totals">`) || !strings.Contains(page, "pod web/affected-1") {
		t.Errorf("totals, where it runs:\n%.3000s", page)
	}
	for _, path := range []string{"/c/lab/packages/ferry/audit/audit", "/c/lab/sbom/audit?image=" + url.QueryEscape(affectedRef)} {
		p := e.get(t, path)
		if !strings.Contains(p, "GO-2023-1988") || (strings.Contains(path, "image=") && strings.Contains(p, "<code>"+fixedRef+"</code>")) {
			t.Errorf("%s:\n%.3000s", path, p)
		}
	}
	// The SBOM page links its image's findings.
	var sb artifact.SBOM
	for _, c := range e.cfg.Components {
		for _, img := range c.Images {
			if img.Ref == affectedRef {
				sb = img.SBOMs[0]
			}
		}
	}
	sp := e.get(t, "/c/lab/packages/ferry/audit/sboms/"+sb.Digest.String())
	m := regexp.MustCompile(`<a href="([^"]+)" id="findings">`).FindStringSubmatch(sp)
	if m == nil {
		t.Fatal("the SBOM page does not link its image's findings")
	}
	link := html.UnescapeString(m[1])
	if u, err := url.Parse(link); err != nil || u.Path != "/c/lab/packages/ferry/audit/audit" || u.Query().Get("image") != affectedRef {
		t.Errorf("the SBOM page links %s", link)
	} else if p := e.get(t, link); !strings.Contains(p, "GO-2023-1988") || strings.Contains(p, "<code>"+fixedRef+"</code>") {
		t.Errorf("%s:\n%.2000s", link, p)
	}
	if p := e.get(t, "/c/lab/packages/ferry/vulns/audit"); !strings.Contains(p, `id="totals">0 findings`) {
		t.Errorf("the database's own package has findings:\n%.2000s", p)
	}

	// A database younger than the default age is not old.
	e2 := startCluster(t, true, Options{AdvisoryMaxAge: 100 * 365 * 24 * time.Hour})
	if p := e2.get(t, "/c/lab/sbom/audit"); strings.Contains(p, "stale-db") || !strings.Contains(p, `id="db-date"`) {
		t.Errorf("a database within its age:\n%.2000s", p)
	}
	// None deployed.
	e3 := startCluster(t, false, Options{})
	if p := e3.get(t, "/c/lab/sbom/audit"); !strings.Contains(p, `id="nodb"`) || !strings.Contains(p, "advisories:") {
		t.Errorf("no database:\n%.2000s", p)
	}
}

// imageSection is the part of the findings page about image ref.
func imageSection(page, ref string) string {
	i := strings.Index(page, "<h3><code>"+ref+"</code>")
	if i < 0 {
		return ""
	}
	rest := page[i+1:]
	if j := strings.Index(rest, "<h3>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}
