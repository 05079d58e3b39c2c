package dashboard

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2/registry/remote/auth"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// noise is n incompressible bytes.
func noise(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// webPackage builds package web at version, holding a.bin and b.bin.
func webPackage(t *testing.T, version string, a, b []byte) string {
	t.Helper()
	src := t.TempDir()
	for name, body := range map[string][]byte{
		definition.FileName: []byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: web, version: " + version + "}\ncomponents:\n  - name: app\n    files:\n      - {source: a.bin, target: /a.bin}\n      - {source: b.bin, target: /b.bin}\n"),
		"a.bin":             a,
		"b.bin":             b,
	} {
		if err := os.WriteFile(filepath.Join(src, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def, err := definition.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "web-"+version+".tar")
	if _, err := build.Create(t.Context(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

// useCentre makes e's actions the real centre's (as `ferry dashboard
// --fleet` wires them), over an in-process registry holding web 1.2.0,
// and returns the registry's host and how to reach it.
func (e *fleetEnv) useCentre(t *testing.T) (string, artifact.RemoteOptions) {
	t.Helper()
	host := registrytest.New(t)
	remote := artifact.RemoteOptions{Credential: auth.StaticCredential(host, auth.EmptyCredential)}
	r, err := artifact.Open(t.Context(), webPackage(t, "1.2.0", []byte("a"), []byte("b")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Push(t.Context(), r, host+"/apps/web:1.2.0", artifact.PushOptions{Remote: remote}); err != nil {
		t.Fatal(err)
	}
	e.srv.fleetActions = newCentre(&FleetOptions{Namespace: fleetNS, Registry: host, Remote: remote, Spool: e.spool})
	return host, remote
}

// placement is e's placement name.
func (e *fleetEnv) placement(t *testing.T, name string) *fleetv1.Placement {
	t.Helper()
	var p fleetv1.Placement
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: fleetNS, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// The fleet's pages over the real centre (the verbs `ferry dashboard
// --fleet` wires: newCentre) and a real registry, the management cluster
// a fake: a carried site's life by the dashboard alone. A tag promoted by
// the form is resolved in the registry; the site's first report
// registers it; a second version promoted, its carry bundle downloaded is
// the delta from its receipt (the changed half-MiB), with its values;
// a rollback pins the first version, recorded as the user's.
func TestFleetWithCentre(t *testing.T) {
	ctx := t.Context()
	host := registrytest.New(t)
	remote := artifact.RemoteOptions{Credential: auth.StaticCredential(host, auth.EmptyCredential)}
	const half = 512 << 10
	a := noise(1, half)
	readers := map[string]*artifact.Reader{}
	for version, b := range map[string][]byte{"1.0.0": noise(2, half), "1.1.0": noise(3, half)} {
		r, err := artifact.Open(ctx, webPackage(t, version, a, b))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Push(ctx, r, host+"/apps/web:"+version, artifact.PushOptions{Remote: remote}); err != nil {
			t.Fatal(err)
		}
		readers[version] = r
	}
	v1, v2 := readers["1.0.0"].Root().Digest.String(), readers["1.1.0"].Root().Digest.String()

	e := startFleet(t, false,
		&fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "web"}, Spec: fleetv1.ReleaseTrackSpec{Repository: "apps/web"}},
		&fleetv1.MemberGroup{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "ships"}, Spec: fleetv1.MemberGroupSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"site": "ship"}}}},
		&fleetv1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "web-ships"}, Spec: fleetv1.PlacementSpec{Track: "web", Channel: "stable",
			Targets: []fleetv1.PlacementTarget{{Group: "ships", Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2}`)}}}}},
	)
	e.srv.fleetActions = newCentre(&FleetOptions{Namespace: fleetNS, Registry: host, Remote: remote, Spool: e.spool})
	// The serving centre: its tokens and its rollout engine.
	serving := &centre.Centre{Client: e.cl, Namespace: fleetNS, Registry: host, Remote: remote, Spool: t.TempDir()}
	promote := func(ref string) {
		t.Helper()
		_, page := get(t, e, "/fleet/tracks/web")
		resp, body := post(t, e, "/fleet/tracks/web/promote", page, url.Values{"channel": {"stable"}, "ref": {ref}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("promote %s: %s\n%s", ref, resp.Status, text(body))
		}
		if err := serving.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A tag, resolved in the registry; its version read from the package.
	promote("1.0.0")
	_, page := get(t, e, "/fleet/tracks/web")
	if got := rowOf(t, page, "stable"); !strings.HasPrefix(got, "stable 1.0.0 "+shortDigest(v1)) {
		t.Errorf("stable after promoting 1.0.0: %q", got)
	}
	if !strings.Contains(text(after(page, `id="promotions">`)), "stable 1.0.0 "+shortDigest(v1)+" copy kubernetes-admin") {
		t.Errorf("the promotion is not recorded as the user's:\n%s", text(page))
	}
	// A version the registry lacks: the centre's one line.
	resp, body := post(t, e, "/fleet/tracks/web/promote", page, url.Values{"channel": {"stable"}, "ref": {"9.9.9"}})
	if resp.StatusCode < 400 || !strings.Contains(body, `id="error">promote: `) || !strings.Contains(body, "9.9.9") {
		t.Errorf("promote a tag the registry lacks: %s\n%s", resp.Status, text(body))
	}

	// The site's first report: its key, a token, what it holds (1.0.0).
	tok, err := serving.CreateToken(ctx, centre.TokenOptions{Labels: map[string]string{"site": "ship"}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := wire.NewSiteKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicPEM()
	have, err := artifact.Have(ctx, readers["1.0.0"], "")
	if err != nil {
		t.Fatal(err)
	}
	receipt, err := have.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	report, err := wire.SignReport(&wire.Report{Member: "ship-1", Created: time.Now().Add(-time.Minute), Agent: "ferry test", Token: tok.String(), PublicKey: string(pub),
		Receipt: receipt, Packages: []fleetv1.MemberPackage{{Name: "web", Placement: "web-ships", Version: "1.0.0", Digest: v1, Ready: true}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	form, ct := multipartReport(t, report)
	resp, body = do(t, e.c, http.MethodPost, e.base+"/fleet/import?csrf="+url.QueryEscape(csrf(t, page)), form, map[string]string{"Content-Type": ct})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/fleet/members/ship-1" {
		t.Fatalf("import: %s\n%s", resp.Status, text(body))
	}
	_, page = get(t, e, "/fleet/members/ship-1")
	for _, want := range []string{"imported the report of ship-1 (1 packages", "Member ship-1 Carried", "Labels site=ship",
		"web web-ships 1.0.0 (" + shortDigest(v1) + ") apps/web Download the bundle and its values"} {
		if !strings.Contains(text(page), want) {
			t.Errorf("the member page lacks %q:\n%s", want, text(page))
		}
	}
	// The same report again: a replay, refused in one line.
	form, ct = multipartReport(t, report)
	resp, body = do(t, e.c, http.MethodPost, e.base+"/fleet/import?from=ship-1&csrf="+url.QueryEscape(csrf(t, page)), form, map[string]string{"Content-Type": ct})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `id="error">import: `) {
		t.Errorf("a replayed report: %s\n%s", resp.Status, text(body))
	}

	// 1.1.0 promoted: the ship's bundle is the delta from its receipt.
	promote("1.1.0")
	_, page = get(t, e, "/fleet/members/ship-1")
	if !strings.Contains(text(page), "web web-ships 1.1.0 ("+shortDigest(v2)+")") {
		t.Fatalf("the member's desired state after promoting 1.1.0:\n%s", text(page))
	}
	resp, body = post(t, e, "/fleet/members/ship-1/bundle", page, url.Values{"package": {"web"}})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Disposition") != `attachment; filename="ship-1-web.tar.zst"` {
		t.Fatalf("bundle: %s %q\n%.300s", resp.Status, resp.Header.Get("Content-Disposition"), text(body))
	}
	t.Logf("the carry bundle 1.0.0 → 1.1.0, one half-MiB file changed: %d bytes", len(body))
	if len(body) < half || len(body) > half+64<<10 || !bytes.HasPrefix([]byte(body), []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Errorf("the bundle is %d bytes (zstd: %v), want the changed %d and a little", len(body), bytes.HasPrefix([]byte(body), []byte{0x28, 0xb5, 0x2f, 0xfd}), half)
	}
	if left, _ := filepath.Glob(filepath.Join(e.spool, "ferry-bundle-*")); len(left) != 0 {
		t.Errorf("the spool keeps %v", left)
	}
	resp, body = do(t, e.c, http.MethodGet, e.base+"/fleet/members/ship-1/values?package=web", nil, nil)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(body) != `{"replicas":2}` {
		t.Errorf("values: %s %q", resp.Status, body)
	}

	// Roll back: the placement is pinned to 1.0.0, by the user.
	_, page = get(t, e, "/fleet/placements/web-ships")
	if !strings.Contains(text(page), "Roll back to 1.0.0 ("+shortDigest(v1)+")") {
		t.Errorf("the placement page:\n%s", text(page))
	}
	if resp, body := post(t, e, "/fleet/placements/web-ships/rollback", page, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("rollback: %s\n%s", resp.Status, text(body))
	}
	var p fleetv1.Placement
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: fleetNS, Name: "web-ships"}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Digest != v1 || p.Spec.Channel != "" || p.Annotations[centre.AnnotationBy] != "kubernetes-admin" {
		t.Errorf("after the rollback: spec %+v, annotations %v", p.Spec, p.Annotations)
	}
	if err := serving.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	_, page = get(t, e, "/fleet/placements/web-ships")
	if hist := text(after(page, `id="history">`)); !strings.Contains(hist, "rollback 1.1.0 ("+shortDigest(v2)+") 1.0.0 ("+shortDigest(v1)+") kubernetes-admin") {
		t.Errorf("the history after the rollback: %s", hist)
	}
}
