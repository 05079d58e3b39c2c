package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

const fleetNS = "ferry-fleet"

// dg is a digest numbered n.
func dg(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// fleetObjects is a small fleet: four connected members (one a canary,
// one stale, one refusing the new version, one revoked), a carried ship,
// two tracks, and a placement whose rollout halted at the refusing member.
func fleetObjects() []client.Object {
	now := time.Now()
	ago := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	cond := func(typ string, ok bool) metav1.Condition {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		return metav1.Condition{Type: typ, Status: s, Reason: typ, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}
	}
	member := func(name, mode string, labels map[string]string, seen time.Duration, ready, stale bool, pkgs ...fleetv1.MemberPackage) *fleetv1.Member {
		m := &fleetv1.Member{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: name, Labels: labels}, Spec: fleetv1.MemberSpec{Mode: mode}}
		m.Status = fleetv1.MemberStatus{LastSeen: ago(seen), Agent: "ferry v0.9.0", Packages: pkgs,
			Conditions: []metav1.Condition{cond(fleetv1.MemberReady, ready), cond(fleetv1.MemberStale, stale)}}
		return m
	}
	web := func(version string, n int, target int, ready bool) fleetv1.MemberPackage {
		return fleetv1.MemberPackage{Name: "web", Placement: "web-prod", Version: version, Digest: dg(n), Target: dg(target), Ready: ready}
	}
	refused := web("1.0.0", 10, 11, true)
	refused.Refused, refused.Reason, refused.Message = true, "Unverified", "no trusted key verifies "+dg(11)
	revoked := member("old-1", fleetv1.Connected, map[string]string{"env": "lab"}, 30*24*time.Hour, false, true)
	revoked.Spec.Revoked = true
	ship := member("ship-1", fleetv1.Carried, map[string]string{"env": "sea"}, 72*time.Hour, true, false,
		fleetv1.MemberPackage{Name: "web", Placement: "web-sea", Version: "1.0.0", Digest: dg(10), Target: dg(10), Ready: true})
	ship.Status.Receipt, ship.Status.ReceiptBlobs, ship.Status.ReceiptBytes = dg(99), 12, 345<<20
	db := fleetv1.MemberPackage{Name: "db", Version: "2.0.0", Digest: dg(20), Ready: true}
	tool := fleetv1.MemberPackage{Name: "site-tool", Version: "0.1.0", Digest: dg(30), Ready: false, Reason: "Failed", Message: "chart site-tool: timed out"}
	canary := func(m *fleetv1.Member) *fleetv1.Member { m.Labels[fleetv1.LabelCanary] = "true"; return m }
	wave := func(name string, w int, target int, state, msg string) fleetv1.PlacedMember {
		return fleetv1.PlacedMember{Name: name, Wave: w, Target: dg(target), State: state, Message: msg, Since: ago(20 * time.Minute)}
	}
	started := metav1.NewTime(now.Add(-25 * time.Minute))
	return []client.Object{
		canary(member("edge-1", fleetv1.Connected, map[string]string{"env": "prod", "region": "eu"}, 10*time.Second, true, false, web("1.1.0", 11, 11, true), db)),
		member("edge-2", fleetv1.Connected, map[string]string{"env": "prod", "region": "us"}, 5*time.Minute, false, true, web("1.0.0", 10, 11, true)),
		member("edge-3", fleetv1.Connected, map[string]string{"env": "prod", "region": "us"}, 20*time.Second, false, false, refused, tool),
		revoked, ship,
		&fleetv1.MemberGroup{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "prod"}, Spec: fleetv1.MemberGroupSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		&fleetv1.MemberGroup{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "sea"}, Spec: fleetv1.MemberGroupSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "sea"}}}},
		&fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "web"},
			Spec: fleetv1.ReleaseTrackSpec{Repository: "apps/web", Channels: []fleetv1.Channel{{Name: "stable", Digest: dg(11), Version: "1.1.0"}, {Name: "beta", Digest: dg(12), Version: "1.2.0-rc.1"}}},
			Status: fleetv1.ReleaseTrackStatus{Promotions: []fleetv1.Promotion{
				{Channel: "stable", Digest: dg(11), Version: "1.1.0", By: "alice", At: started},
				{Channel: "stable", Digest: dg(10), Version: "1.0.0", By: "bob", At: metav1.NewTime(now.Add(-48 * time.Hour))},
			}}},
		&fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "db"},
			Spec: fleetv1.ReleaseTrackSpec{Repository: "apps/postgres", Package: "db", Channels: []fleetv1.Channel{{Name: "stable", Digest: dg(20), Version: "2.0.0"}}}},
		&fleetv1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "web-prod"},
			Spec: fleetv1.PlacementSpec{Track: "web", Channel: "stable", Targets: []fleetv1.PlacementTarget{{Group: "prod"}}},
			Status: fleetv1.PlacementStatus{Digest: dg(11), Version: "1.1.0", Current: dg(10), Previous: dg(9), Phase: fleetv1.PhaseHalted, Wave: 1,
				Message: "member edge-3 refused " + dg(11) + ": no trusted key verifies it",
				Members: []fleetv1.PlacedMember{wave("edge-1", 0, 11, "Ready", ""), wave("edge-2", 1, 11, "Updating", ""), wave("edge-3", 1, 11, "Refused", "no trusted key verifies it")},
				History: []fleetv1.RolloutRecord{
					{Action: "rollout", From: dg(10), To: dg(11), Version: "1.1.0", By: "alice", Started: started, Result: fleetv1.PhaseHalted, Message: "member edge-3 refused it",
						Members: []string{"edge-1: Ready", "edge-3: Refused (no trusted key verifies it)"}},
					{Action: "rollout", From: dg(9), To: dg(10), Version: "1.0.0", By: "bob", Started: metav1.NewTime(now.Add(-47 * time.Hour)), Finished: ago(46 * time.Hour), Result: fleetv1.PhaseComplete},
				}}},
		&fleetv1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "web-sea"},
			Spec:   fleetv1.PlacementSpec{Track: "web", Digest: dg(10), Targets: []fleetv1.PlacementTarget{{Group: "sea", Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicas":1}`)}}}},
			Status: fleetv1.PlacementStatus{Digest: dg(10), Version: "1.0.0", Current: dg(10), Phase: fleetv1.PhaseComplete}},
	}
}

// newFakeFleet is a management cluster's API of the fleet's objects.
func newFakeFleet(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(fleetScheme).
		WithStatusSubresource(&fleetv1.Member{}, &fleetv1.MemberGroup{}, &fleetv1.ReleaseTrack{}, &fleetv1.Placement{}).
		WithObjects(objs...).Build()
}

// viewerOf is cl as a user RBAC lets read placements and tracks, but
// neither list members nor change anything.
func viewerOf(cl client.WithWatch) client.WithWatch {
	forbid := func(verb, resource string) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: fleetv1.GroupVersion.Group, Resource: resource}, "",
			fmt.Errorf(`User "viewer" cannot %s resource %q in API group %q in the namespace %q`, verb, resource, fleetv1.GroupVersion.Group, fleetNS))
	}
	return interceptor.NewClient(cl, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*fleetv1.MemberList); ok {
				return forbid("list", "members")
			}
			return c.List(ctx, list, opts...)
		},
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return forbid("update", "placements")
		},
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return forbid("update", "placements/status")
		},
	})
}

// fakeActions stand for the centre's verbs: they change the fake
// management cluster as the centre would, through the user's client, and
// record who asked for what.
type fakeActions struct {
	cl client.WithWatch

	mu    *sync.Mutex
	calls *[]string
}

func (f *fakeActions) record(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.calls = append(*f.calls, fmt.Sprintf(format, a...))
}

func (f *fakeActions) Rollback(ctx context.Context, name, by string) (*fleetv1.Placement, error) {
	f.record("rollback %s by %s", name, by)
	var p fleetv1.Placement
	if err := f.cl.Get(ctx, client.ObjectKey{Namespace: fleetNS, Name: name}, &p); err != nil {
		return nil, err
	}
	to := p.Status.Previous
	if p.Status.Current != "" && p.Status.Digest != p.Status.Current {
		to = p.Status.Current
	}
	if to == "" {
		return nil, fmt.Errorf("placement %s has no earlier version to roll back to", name)
	}
	p.Spec.Digest, p.Spec.Channel = to, ""
	if err := f.cl.Update(ctx, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func (f *fakeActions) Promote(ctx context.Context, track, channel, ref, by string) (*fleetv1.ReleaseTrack, error) {
	f.record("promote %s %s %s by %s", track, channel, ref, by)
	var t fleetv1.ReleaseTrack
	if err := f.cl.Get(ctx, client.ObjectKey{Namespace: fleetNS, Name: track}, &t); err != nil {
		return nil, err
	}
	digest, version := ref, ""
	if ref == "1.2.0" { // the one tag the fake registry has
		digest, version = dg(13), "1.2.0"
	}
	if !strings.HasPrefix(digest, "sha256:") {
		return nil, fmt.Errorf("tag %s is not in repository %s", ref, t.Spec.Repository)
	}
	ch := fleetv1.Channel{Name: channel, Digest: digest, Version: version}
	found := false
	for i := range t.Spec.Channels {
		if t.Spec.Channels[i].Name == channel {
			t.Spec.Channels[i], found = ch, true
		}
	}
	if !found {
		t.Spec.Channels = append(t.Spec.Channels, ch)
	}
	if err := f.cl.Update(ctx, &t); err != nil {
		return nil, err
	}
	t.Status.Promotions = append([]fleetv1.Promotion{{Channel: channel, Digest: digest, Version: version, By: by, At: metav1.Now()}}, t.Status.Promotions...)
	if err := f.cl.Status().Update(ctx, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

func (f *fakeActions) Import(ctx context.Context, data []byte) (*fleetv1.Member, error) {
	f.record("import %d bytes", len(data))
	if string(data) != "signed report of ship-1" {
		return nil, errors.New("the report's signature does not verify with member ship-1's key")
	}
	var m fleetv1.Member
	if err := f.cl.Get(ctx, client.ObjectKey{Namespace: fleetNS, Name: "ship-1"}, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Desired is the centre's: for each placement, the first target whose
// group selects the member; a connected member gets its rollout's target,
// a carried one the placement's current version.
func (f *fakeActions) Desired(ctx context.Context, member string) (*wire.Desired, error) {
	var m fleetv1.Member
	if err := f.cl.Get(ctx, client.ObjectKey{Namespace: fleetNS, Name: member}, &m); err != nil {
		return nil, err
	}
	var groups fleetv1.MemberGroupList
	var pl fleetv1.PlacementList
	var tl fleetv1.ReleaseTrackList
	for _, l := range []client.ObjectList{&groups, &pl, &tl} {
		if err := f.cl.List(ctx, l, client.InNamespace(fleetNS)); err != nil {
			return nil, err
		}
	}
	selects := map[string]bool{}
	for _, g := range groups.Items {
		sel, err := metav1.LabelSelectorAsSelector(&g.Spec.Selector)
		selects[g.Name] = err == nil && sel.Matches(labels.Set(m.Labels))
	}
	d := &wire.Desired{}
	for _, p := range pl.Items {
		for _, tg := range p.Spec.Targets {
			if !selects[tg.Group] {
				continue
			}
			dp := wire.DesiredPackage{Placement: p.Name, Digest: p.Status.Current}
			for _, pm := range p.Status.Members {
				if pm.Name == m.Name && m.Spec.Mode != fleetv1.Carried {
					dp.Digest = pm.Target
				}
			}
			for i := range tl.Items {
				if t := &tl.Items[i]; t.Name == p.Spec.Track {
					dp.Name, dp.Repository = t.PackageName(), t.Spec.Repository
					vs := versions{}
					vs.addTrack(t)
					dp.Version = vs[dp.Digest]
				}
			}
			if tg.Values != nil {
				dp.Values = tg.Values.Raw
			}
			d.Packages = append(d.Packages, dp)
			break
		}
	}
	return d, nil
}

// fakeBundle is what the fake centre writes as a bundle.
const fakeBundle = "a carry bundle: the delta from the receipt"

func (f *fakeActions) Bundle(ctx context.Context, member, pkg, out string) (*centre.BundleResult, error) {
	f.record("bundle %s %s", member, pkg)
	if pkg != "web" {
		return nil, fmt.Errorf("package %s is not placed on member %s", pkg, member)
	}
	if err := os.WriteFile(out, []byte(fakeBundle), 0o600); err != nil {
		return nil, err
	}
	return &centre.BundleResult{Member: member, Package: pkg}, nil
}

// fakeKube answers what the dashboard asks the management cluster's API
// server besides the fleet's objects: who a token is (TokenReview) and
// who the kubeconfig is (SelfSubjectReview).
func fakeKube(t testing.TB) *rest.Config {
	users := map[string]string{"alice-token": "alice", "viewer-token": "viewer"}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			body, _ := io.ReadAll(r.Body)
			_, _, _ = scheme.Codecs.UniversalDeserializer().Decode(body, nil, &tr) // protobuf or JSON
			tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
			tr.Status.User.Username, tr.Status.Authenticated = users[tr.Spec.Token], users[tr.Spec.Token] != ""
			_ = json.NewEncoder(w).Encode(tr)
		case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			// RBAC: the viewer may read, everyone else anything.
			var sar authorizationv1.SelfSubjectAccessReview
			body, _ := io.ReadAll(r.Body)
			_, _, _ = scheme.Codecs.UniversalDeserializer().Decode(body, nil, &sar)
			sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
			ra := sar.Spec.ResourceAttributes
			sar.Status.Allowed = r.Header.Get("Authorization") != "Bearer viewer-token" || (ra != nil && slices.Contains([]string{"get", "list", "watch"}, ra.Verb))
			_ = json.NewEncoder(w).Encode(sar)
		case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
			ssr := authenticationv1.SelfSubjectReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview"}}
			ssr.Status.UserInfo.Username = "kubernetes-admin"
			_ = json.NewEncoder(w).Encode(ssr)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	return &rest.Config{Host: ts.URL, Timeout: 5 * time.Second}
}

// fleetEnv is a dashboard with the fleet pages over a fake management
// cluster.
type fleetEnv struct {
	base  string
	c     *http.Client
	srv   *Server
	cl    client.WithWatch
	mu    sync.Mutex
	calls []string
	spool string
}

func (e *fleetEnv) called() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

// startFleet serves a dashboard with the fleet pages over objs; with
// login, the token viewer-token is a user RBAC lets only read (viewerOf).
func startFleet(t testing.TB, login bool, objs ...client.Object) *fleetEnv {
	t.Helper()
	e := &fleetEnv{cl: newFakeFleet(objs...), spool: t.TempDir()}
	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Clusters: []Cluster{{Name: "centre", Config: fakeKube(t)}}, Namespace: "ferry",
		Hosts: HostsFor(ts.Listener.Addr().String()), Login: login, Fleet: &FleetOptions{Namespace: fleetNS, Spool: e.spool}})
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
	jar, _ := cookiejar.New(nil)
	e.base, e.srv = ts.URL, srv
	e.c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

// login logs e's browser in with token.
func (e *fleetEnv) login(t *testing.T, token string) {
	t.Helper()
	_, page := do(t, e.c, http.MethodGet, e.base+"/login", nil, nil)
	resp, body := do(t, e.c, http.MethodPost, e.base+"/login", strings.NewReader(url.Values{"csrf": {csrf(t, page)}, "token": {token}}.Encode()),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login as %s: %s\n%s", token, resp.Status, body)
	}
}

// newFakeFleetWithout is a cluster whose API server has no fleet API.
func newFakeFleetWithout() client.WithWatch {
	return interceptor.NewClient(newFakeFleet(), interceptor.Funcs{
		List: func(_ context.Context, _ client.WithWatch, list client.ObjectList, _ ...client.ListOption) error {
			return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: fleetv1.GroupVersion.Group, Kind: "Member"}, SearchedVersions: []string{"v1alpha1"}}
		},
	})
}
