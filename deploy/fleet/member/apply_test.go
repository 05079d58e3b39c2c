package member

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2/errdef"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// joined is a member that joined c: its agent, the Secret holding its
// credential.
func joined(t *testing.T, c *centre, m *member) *Agent {
	t.Helper()
	ctx := context.Background()
	if err := WriteJoin(ctx, m.cs, ns, Config{URL: c.srv.URL, Token: c.token.String(), Name: "site-a"}); err != nil {
		t.Fatal(err)
	}
	a := m.agent(t)
	if wait := a.step(ctx); wait != 0 {
		st, _ := ReadStatus(ctx, m.cs, ns)
		t.Fatalf("the join step: %+v", st)
	}
	return a
}

func syncOnce(t *testing.T, a *Agent) *wire.Desired {
	t.Helper()
	d, err := a.SyncOnce(context.Background())
	if err != nil {
		t.Fatalf("SyncOnce: %v", err)
	}
	return d
}

func (m *member) pkg(t *testing.T, name string) *pkgapi.Package {
	t.Helper()
	var p pkgapi.Package
	err := m.pc.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// ready does what the controller would: the Package runs Ready at its
// spec's digest.
func (m *member) ready(t *testing.T, name, version string) {
	t.Helper()
	p := m.pkg(t, name)
	p.Status.Digest, p.Status.Version, p.Status.ObservedGeneration = p.Spec.Digest, version, p.Generation
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: pkgapi.Ready, Status: metav1.ConditionTrue, Reason: pkgapi.ReasonInstalled, ObservedGeneration: p.Generation})
	if err := m.pc.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// holds tells whether the member's registry holds the manifest d in repo.
func (m *member) holds(t *testing.T, repo, d string) bool {
	t.Helper()
	r, err := artifact.RemoteOptions{}.Repository(m.host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Resolve(context.Background(), d)
	if errors.Is(err, errdef.ErrNotFound) {
		return false
	}
	if err != nil && strings.Contains(err.Error(), "NAME_UNKNOWN") {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func (m *member) repositories(t *testing.T) []string {
	t.Helper()
	reg, err := artifact.RemoteOptions{}.Registry(m.host)
	if err != nil {
		t.Fatal(err)
	}
	var repos []string
	if err := reg.Repositories(context.Background(), "", func(page []string) error { repos = append(repos, page...); return nil }); err != nil {
		t.Fatal(err)
	}
	return repos
}

func reported(t *testing.T, rep wire.Report, name string) v1alpha1.MemberPackage {
	t.Helper()
	for _, p := range rep.Packages {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("the report has no package %s: %+v", name, rep.Packages)
	return v1alpha1.MemberPackage{}
}

// TestApply: what the centre places is fetched as a delta against the
// member's receipt and deployed as `ferry deploy` deploys it — verified
// with the member's own keys, its Package naming their Secrets, with the
// placement's values and components, labelled with the placement; an
// update carries only what the registry lacks; a package no key of the
// member verifies is refused, nothing pushed, the running version kept,
// and the refusal reported and not tried again until the keys change; a
// package no longer placed is deleted, one deployed by hand is not.
func TestApply(t *testing.T) {
	ctx := context.Background()
	ours, theirs := newSigner(t), newSigner(t)
	v1, v1d := buildPackage(t, "app", "1.0.0", "a = 1\n", ours)
	v2, v2d := buildPackage(t, "app", "2.0.0", "a = 2\n", ours)
	v3, v3d := buildPackage(t, "app", "3.0.0", "a = 3\n", theirs)
	rogue, rogued := buildPackage(t, "rogue", "1.0.0", "r\n", theirs)
	c := newCentre(t)
	c.set(func(c *centre) {
		c.packages[v1d], c.packages[v2d], c.packages[v3d], c.packages[rogued] = v1, v2, v3, rogue
	})
	m := newMember(t, ours.pub)
	ourSecret, err := deploy.EnsureKeySecret(ctx, m.cs, ns, ours.pub)
	if err != nil {
		t.Fatal(err)
	}
	a := joined(t, c, m)
	place := func(pkgs ...wire.DesiredPackage) {
		c.set(func(c *centre) {
			c.desired = wire.Desired{Generation: time.Now().String(), IntervalSeconds: 30, Packages: pkgs}
		})
	}
	app := func(d string) wire.DesiredPackage {
		return wire.DesiredPackage{Name: "app", Placement: "web", Repository: "apps/app", Digest: d,
			Values: json.RawMessage(`{"replicas":2,"image":{"tag":"x"}}`), Components: []string{"app"}, TimeoutSeconds: 120}
	}

	// v1 onto an empty registry: the whole package crosses.
	place(app(v1d))
	syncOnce(t, a)
	p := m.pkg(t, "app")
	switch {
	case p == nil:
		t.Fatal("no Package app after the first sync")
	case p.Spec.Digest != v1d || p.Labels[LabelPlacement] != "web":
		t.Fatalf("Package app: digest %s, labels %v", p.Spec.Digest, p.Labels)
	case len(p.Spec.Keys) != 1 || p.Spec.Keys[0] != ourSecret:
		t.Fatalf("Package app names keys %+v, not the member's Secret %+v", p.Spec.Keys, ourSecret)
	case p.Spec.Values == nil || string(p.Spec.Values.Raw) != `{"image":{"tag":"x"},"replicas":2}`:
		t.Fatalf("Package app's values: %v", p.Spec.Values)
	case !slices.Equal(p.Spec.Components, []string{"app"}) || p.Spec.Timeout.Duration != 2*time.Minute:
		t.Fatalf("Package app: components %v, timeout %v", p.Spec.Components, p.Spec.Timeout)
	case !m.holds(t, "app", v1d):
		t.Fatal("v1 is not in the member's registry")
	}
	if _, _, _, bundles := c.count(); bundles != 1 || c.deltas[0].Omitted != 0 {
		t.Fatalf("first bundle: %d requests, %+v", bundles, c.deltas[0])
	}

	// Ready at v1: nothing to do; the report says so, with the new receipt.
	m.ready(t, "app", "1.0.0")
	syncOnce(t, a)
	rep := c.lastReport()
	if got := reported(t, rep, "app"); !got.Ready || got.Digest != v1d || got.Target != v1d || got.Placement != "web" || got.Refused {
		t.Fatalf("reported %+v", got)
	}
	rc, err := artifact.ParseReceipt(rep.Receipt)
	if err != nil || rc.Blobs[digest.Digest(v1d)] == 0 {
		t.Fatalf("the report after the deploy carries no receipt holding v1: %v", err)
	}
	syncOnce(t, a)
	if _, _, _, bundles := c.count(); bundles != 1 {
		t.Fatalf("%d bundle requests for a package that runs Ready", bundles)
	}
	if rep := c.lastReport(); rep.Receipt != nil {
		t.Fatal("a heartbeat repeats a receipt the centre has")
	}

	// v2: only what the registry lacks crosses.
	place(app(v2d))
	syncOnce(t, a)
	if p := m.pkg(t, "app"); p.Spec.Digest != v2d || !m.holds(t, "app", v2d) {
		t.Fatalf("after v2 was placed: Package at %s", p.Spec.Digest)
	}
	c.mu.Lock()
	size, delta := c.bundleSizes[1], c.deltas[1]
	c.mu.Unlock()
	if full := fileSize(t, v2); delta.Omitted == 0 || size > full/4 || delta.OmittedSize < 1<<20 {
		t.Fatalf("v2's bundle is %d bytes of the package's %d (%+v): more than the registry lacked", size, full, delta)
	}
	m.ready(t, "app", "2.0.0")

	// v3, signed by a key the member does not trust: refused.
	place(app(v3d))
	syncOnce(t, a)
	if p := m.pkg(t, "app"); p.Spec.Digest != v2d {
		t.Fatalf("a refused v3 changed the Package: %s", p.Spec.Digest)
	}
	if m.holds(t, "app", v3d) {
		t.Fatal("a refused v3 was pushed")
	}
	syncOnce(t, a)
	got := reported(t, c.lastReport(), "app")
	if !got.Refused || got.Reason != ReasonVerificationFailed || got.Target != v3d || got.Digest != v2d || !got.Ready || !oneLineMessage(got.Message) {
		t.Fatalf("reported after the refusal: %+v", got)
	}
	if _, _, _, bundles := c.count(); bundles != 3 {
		t.Fatalf("%d bundle requests: a refused digest is asked for again", bundles)
	}

	// Another package signed by that key: refused, nothing pushed.
	place(app(v2d), wire.DesiredPackage{Name: "rogue", Placement: "tools", Repository: "tools/rogue", Digest: rogued})
	syncOnce(t, a)
	syncOnce(t, a)
	if m.pkg(t, "rogue") != nil || slices.Contains(m.repositories(t), "rogue") {
		t.Fatalf("a refused package reached the cluster: repositories %v", m.repositories(t))
	}
	if got := reported(t, c.lastReport(), "rogue"); !got.Refused || got.Reason != ReasonVerificationFailed || got.Target != rogued || got.Digest != "" {
		t.Fatalf("reported rogue: %+v", got)
	}
	if got := reported(t, c.lastReport(), "app"); got.Refused || !got.Ready {
		t.Fatalf("app, placed at v2 again: %+v", got)
	}
	// The member comes to trust that key: tried again, deployed.
	theirSecret, err := deploy.EnsureKeySecret(ctx, m.cs, ns, theirs.pub)
	if err != nil {
		t.Fatal(err)
	}
	syncOnce(t, a)
	if p := m.pkg(t, "rogue"); p == nil || len(p.Spec.Keys) != 1 || p.Spec.Keys[0] != theirSecret {
		t.Fatalf("rogue once its key is trusted: %+v", p)
	}

	// A package deployed by hand, and the placements gone.
	manual := &pkgapi.Package{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "manual"}, Spec: pkgapi.PackageSpec{Repository: "manual", Digest: v1d}}
	if err := m.pc.Create(ctx, manual); err != nil {
		t.Fatal(err)
	}
	place()
	syncOnce(t, a)
	if m.pkg(t, "app") != nil || m.pkg(t, "rogue") != nil {
		t.Fatal("packages no longer placed are still there")
	}
	if m.pkg(t, "manual") == nil {
		t.Fatal("a package deployed by hand was deleted")
	}
	syncOnce(t, a)
	if rep := c.lastReport(); len(rep.Packages) != 1 || rep.Packages[0].Name != "manual" || rep.Packages[0].Placement != "" {
		t.Fatalf("reported at the end: %+v", rep.Packages)
	}
	if st, err := ReadStatus(ctx, m.cs, ns); err != nil || st.Error != "" || st.LastSync.IsZero() {
		t.Fatalf("status after the syncs: %+v, %v", st, err)
	}
}
