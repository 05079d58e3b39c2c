package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/dashboard"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/browser"
)

// TestDashboard drives `ferry dashboard`'s pages in a real, headless
// Chromium against the cluster: an operator (a token with cluster-admin,
// the dashboard on loopback acting with their kubeconfig) inspects a
// tampered archive and a signed one, uploads the tampered one and sees
// the refusal, uploads the signed one and watches it become Ready, finds
// it in the list, opens it (graph, objects, history, events), and
// measures the registry. Off loopback, a browser without a login is sent
// to the login page, a bad token is refused, and a user who may only read
// Packages sees them and has an upload refused. Screenshots of each step
// go to the test's artifact directory (go test -artifacts).
func TestDashboard(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 12*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	ns := cluster.DefaultNamespace
	priv, _, trusted := trustNewKey(ctx, t, c)
	t.Cleanup(func() { forgetPackage(context.Background(), t, c, "e2e-dash") })
	operator := adminKubeconfig(ctx, t, c, "e2e-dash-operator")
	viewer := tokenKubeconfig(ctx, t, c, "e2e-dash-viewer", append(uploaderRules[:4:4],
		rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"packages"}, Verbs: []string{"get", "list"}}))

	pkg, _ := chartPackage(ctx, t, c, "e2e-dash", "1.0.0", "dash", "e2e-dash", priv)
	tampered := filepath.Join(t.TempDir(), "e2e-dash-tampered.tar")
	copyFile(t, pkg, tampered)
	flipLayerByte(t, tampered)

	base := serveDashboard(t, operator, false)
	b, console := browser.New(t)
	shots := t.ArtifactDir()
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string, wait time.Duration) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(b, wait)
		defer cancel()
		err := chromedp.Do(sctx, chromedp.WaitVisible(chromedp.CSS(sel)))
		s := ""
		if err == nil {
			s, err = chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		}
		if err != nil {
			page, _ := chromedp.Run(b, chromedp.Text(chromedp.CSS("main")))
			shot("failed")
			t.Fatalf("%s: %v; the page says:\n%s", sel, err, page)
		}
		return s
	}
	pick := func(file string) {
		t.Helper()
		if err := chromedp.Do(b, chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{file})); err != nil {
			t.Fatal(err)
		}
	}
	click := func(sel string) {
		t.Helper()
		if err := chromedp.Do(b, chromedp.Click(chromedp.CSS(sel))); err != nil {
			t.Fatal(err)
		}
	}
	nav := func(u string) {
		t.Helper()
		if err := chromedp.Do(b, chromedp.Navigate(u)); err != nil {
			t.Fatal(err)
		}
	}

	// Inspect, in the dashboard alone: the tampered archive fails, the
	// signed one verifies with the cluster's key.
	nav(base + "/c/e2e/upload")
	pick(tampered)
	click("#inspect-btn")
	if v := text("#verdict", time.Minute); !strings.Contains(v, "does not match") {
		t.Fatalf("inspect of a tampered archive: %q", v)
	}
	shot("1-inspect-tampered")
	pick(pkg)
	click("#inspect-btn")
	if v := text("#verdict.ok", time.Minute); !strings.Contains(v, trusted.Name) {
		t.Fatalf("inspect of the signed archive: %q, want signed by %s", v, trusted.Name)
	}
	shot("2-inspect-signed")

	// Upload: the tampered one is refused with the agent's line; nothing
	// reaches the registry.
	nav(base + "/c/e2e/upload")
	pick(tampered)
	click("#upload-btn")
	if v := text("#refusal", 2*time.Minute); !strings.Contains(v, "422") || !strings.Contains(v, "does not match") {
		t.Fatalf("upload of a tampered archive: %q", v)
	}
	shot("3-upload-tampered")
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.Package
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e2e-dash"}, &p); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused upload left a Package: %v", err)
	}
	// The signed one: verified, pushed, applied, Ready, as it happens.
	start := time.Now()
	pick(pkg)
	click("#upload-btn")
	done := text("#done", 5*time.Minute)
	t.Logf("TIMING browser upload → Ready: %.1fs: %s", time.Since(start).Seconds(), done)
	if !strings.Contains(done, "Ready=True") || !strings.Contains(done, "e2e-dash 1.0.0") {
		t.Fatalf("upload: %q", done)
	}
	phases, _ := chromedp.Run(b, chromedp.Text(chromedp.CSS("#phases")))
	for _, want := range []string{"received", "verified", "pushed", "Ready=True"} {
		if !strings.Contains(phases, want) {
			t.Errorf("upload phases lack %q:\n%s", want, phases)
		}
	}
	shot("4-upload-ready")

	// The list, then the package.
	nav(base + "/")
	row := text(`tr.package[data-name="e2e-dash"]`, time.Minute)
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e2e-dash"}, &p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.0.0", "True", p.Status.ShortDigest, trusted.Name} {
		if !strings.Contains(row, want) {
			t.Errorf("packages page row lacks %q: %q", want, row)
		}
	}
	shot("5-packages")
	click(`tr.package[data-name="e2e-dash"] a`)
	graph := text("#graph", time.Minute)
	for _, want := range []string{"e2e-dash 1.0.0", "ferry.json", "image", "chart", "signature", shortHex(p.Status.Digest)} {
		if !strings.Contains(graph, want) {
			t.Errorf("graph lacks %q:\n%s", want, graph)
		}
	}
	if objs := text("#objects", 10*time.Second); !strings.Contains(objs, "e2e-dash-manifest") || !strings.Contains(objs, "present") {
		t.Errorf("objects: %q", objs)
	}
	if conds := text("#conditions", 10*time.Second); !strings.Contains(conds, "Verified") || !strings.Contains(conds, "Ready") {
		t.Errorf("conditions: %q", conds)
	}
	body, _ := chromedp.Run(b, chromedp.Text(chromedp.CSS("main")))
	if !strings.Contains(body, "deployed") {
		t.Errorf("the package page shows no deployed release revision:\n%s", body)
	}
	shot("6-package")

	// The registry: its repositories, and what GC would free.
	nav(base + "/c/e2e/registry")
	if repos := text("#repositories", time.Minute); !strings.Contains(repos, "e2e-dash") {
		t.Errorf("registry page: %q", repos)
	}
	click("#measure button")
	used, free := text("#used", 2*time.Minute), text("#freeable", 10*time.Second)
	t.Logf("registry: used %s; GC would free %s", used, free)
	if !strings.Contains(used, "iB") && !strings.Contains(used, " B") {
		t.Errorf("storage used: %q", used)
	}
	shot("7-registry")

	// Off loopback: a login, and RBAC as the user's.
	login := serveDashboard(t, operator, true)
	nav(login + "/")
	if loc, err := chromedp.Run(b, chromedp.Location()); err != nil || !strings.HasSuffix(loc, "/login") {
		t.Fatalf("without a login: at %q (%v), want /login", loc, err)
	}
	resp, err := http.Get(login + "/c/e2e/registry")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/login" {
		t.Errorf("an unauthenticated request got %s %s", resp.Status, resp.Request.URL)
	}
	if err := chromedp.Do(b, chromedp.SendKeys(chromedp.CSS("textarea[name=token]"), "not-a-token"), chromedp.Submit(chromedp.CSS("#login textarea"))); err != nil {
		t.Fatal(err)
	}
	if e := text("#error", time.Minute); !strings.Contains(e, "does not know this token") {
		t.Errorf("bad token: %q", e)
	}
	shot("8-login-refused")
	if err := chromedp.Do(b, chromedp.SendKeys(chromedp.CSS("textarea[name=token]"), kubeconfigToken(t, viewer)), chromedp.Submit(chromedp.CSS("#login textarea"))); err != nil {
		t.Fatal(err)
	}
	if who := text("#user", time.Minute); !strings.Contains(who, "e2e-dash-viewer") {
		t.Errorf("logged in as %q", who)
	}
	if row := text(`tr.package[data-name="e2e-dash"]`, time.Minute); !strings.Contains(row, "True") {
		t.Errorf("the viewer's packages page: %q", row)
	}
	shot("9-viewer-packages")
	nav(login + "/c/e2e/upload")
	pick(pkg)
	click("#upload-btn")
	if v := text("#refusal", 2*time.Minute); !strings.Contains(v, "403") || !strings.Contains(v, "may not create or update packages.ferry.dev") {
		t.Fatalf("the viewer's upload: %q", v)
	}
	shot("10-viewer-upload-refused")
	if errs := console.Errors(); len(errs) > 0 {
		t.Errorf("the pages logged errors: %q", errs)
	}
	t.Logf("screenshots in %s", shots)
}

// serveDashboard serves a dashboard acting with kubeconfig, on loopback
// (with login, as it would be off loopback), and returns its URL.
func serveDashboard(t testing.TB, kubeconfig string, login bool) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dashboard.New(dashboard.Options{
		Clusters: []dashboard.Cluster{{Name: "e2e", Config: cfg}}, Namespace: cluster.DefaultNamespace,
		Hosts: dashboard.HostsFor(l.Addr().String()), Login: login,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return "http://" + l.Addr().String()
}

// adminKubeconfig is tokenKubeconfig for a ServiceAccount bound to
// cluster-admin: an operator whose kubeconfig carries a token.
func adminKubeconfig(ctx context.Context, t testing.TB, c *harness.Cluster, name string) string {
	t.Helper()
	kc := tokenKubeconfig(ctx, t, c, name, nil)
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: cluster.DefaultNamespace}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return kc
}

// kubeconfigToken is the bearer token of a tokenKubeconfig.
func kubeconfigToken(t testing.TB, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.AuthInfos["sa"].Token
}

func shortHex(d string) string {
	_, hex, _ := strings.Cut(d, ":")
	if len(hex) > 12 {
		return hex[:12]
	}
	return hex
}

// BenchmarkDashboard times the dashboard's pages, rendered on the server
// from the cluster's API, with 50 Packages: the packages page and one
// package's page (budget: < 200 ms each).
func BenchmarkDashboard(b *testing.B) {
	c := harness.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(b)}); err != nil {
		b.Fatal(err)
	}
	ns := cluster.DefaultNamespace
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	b.Cleanup(func() {
		for _, n := range names {
			forgetPackage(context.Background(), b, c, n)
		}
	})
	// 50 Packages with a status as the controller writes it (its
	// reconciles meanwhile only add load, as they would in a cluster).
	for i := range 50 {
		name := fmt.Sprintf("e2e-bench-dash-%02d", i)
		names = append(names, name)
		dg := fmt.Sprintf("sha256:%064x", i+1)
		p := &v1alpha1.Package{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1alpha1.PackageSpec{Repository: name, Digest: dg, Keys: []v1alpha1.KeyReference{{Name: "e2e-bench-no-such-key"}}},
		}
		if err := pc.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	kc := adminKubeconfig(ctx, b, c, "e2e-bench-dash")
	base := serveDashboard(b, kc, false)
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	get := func(path string) time.Duration {
		start := time.Now()
		resp, err := cl.Get(base + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s", path, resp.Status)
		}
		return time.Since(start)
	}
	get("/") // clients, discovery, session: once per user
	get("/c/e2e/packages/" + ns + "/" + names[0])
	var list, one time.Duration
	b.ResetTimer()
	for range b.N {
		list += get("/")
		one += get("/c/e2e/packages/" + ns + "/" + names[0])
	}
	b.StopTimer()
	lms, oms := float64(list.Microseconds())/1000/float64(b.N), float64(one.Microseconds())/1000/float64(b.N)
	verdict := "within budget"
	if lms >= 200 || oms >= 200 {
		verdict = "OVER BUDGET"
	}
	fmt.Printf("dashboard with 50 Packages: packages page %.1f ms, package page %.1f ms (budget < 200 ms: %s)\n", lms, oms, verdict)
	b.ReportMetric(lms, "list-ms")
	b.ReportMetric(oms, "package-ms")
}
