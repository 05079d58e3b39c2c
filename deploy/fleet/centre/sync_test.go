package centre_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestSync: a member reads only its own desired state (the package placed
// on its group, with the group's values); a report for another member,
// another member's credential, a revoked or deleted member are refused;
// a heartbeat that changes nothing writes lastSeen at most once per
// interval.
func TestSync(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	v1 := w.push(pkgBuild(t, "app", "1.0.0", map[string][]byte{}), "apps/app:1.0.0")
	w.place("app", "apps/app", "stable", map[string]string{"region": "east"}, `{"replicas":2}`, v1alpha1.Strategy{})
	if _, err := w.c.Promote(ctx, "app", "stable", "1.0.0", "alice"); err != nil {
		t.Fatal(err)
	}
	tok := w.token(centre.TokenOptions{Uses: 3})
	east := w.join("east", tok, map[string]string{"region": "east"})
	west := w.join("west", tok, map[string]string{"region": "west"})
	w.reconcile()

	if err := east.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := west.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(east.last.Packages) != 1 || len(west.last.Packages) != 0 {
		t.Fatalf("desired: east %+v, west %+v", east.last, west.last)
	}
	p := east.last.Packages[0]
	if p.Name != "app" || p.Placement != "app" || p.Repository != "apps/app" || p.Digest != v1.Root().Digest.String() ||
		p.Version != "1.0.0" || string(p.Values) != `{"replicas":2}` || east.last.IntervalSeconds != 30 || east.last.Generation == "" {
		t.Errorf("east's desired package: %+v", east.last)
	}
	if west.last.Generation == east.last.Generation {
		t.Error("two desired states share a generation")
	}
	if d, err := w.c.Desired(ctx, "west"); err != nil || len(d.Packages) != 0 {
		t.Errorf("Desired(west): %+v, %v", d, err)
	}

	t.Run("report recorded", func(t *testing.T) {
		if err := east.sync(ctx); err != nil { // reports what it applied
			t.Fatal(err)
		}
		m := w.member("east")
		if len(m.Status.Packages) != 1 || !m.Status.Packages[0].Ready || m.Status.Agent != "test" || m.Status.LastSeen == nil {
			t.Errorf("east's status: %+v", m.Status)
		}
		// A report carrying a receipt: kept in the registry, summed up in
		// the status.
		rc, err := artifact.Have(ctx, v1, "")
		if err != nil {
			t.Fatal(err)
		}
		rep := east.report()
		rep.Receipt = receiptJSON(t, rc)
		if _, err := east.cl.Sync(ctx, rep); err != nil {
			t.Fatal(err)
		}
		m = w.member("east")
		repo, err := w.remote.Repository(w.host + "/" + centre.ReceiptRepository + "/east")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Resolve(ctx, "latest"); err != nil || m.Status.ReceiptBlobs != len(rc.Blobs) || m.Status.ReceiptBytes != rc.Size() || !strings.HasPrefix(m.Status.Receipt, "sha256:") {
			t.Errorf("the receipt: %v; status %s %d blobs %d bytes", err, m.Status.Receipt, m.Status.ReceiptBlobs, m.Status.ReceiptBytes)
		}
		w.reconcile()
		m = w.member("east")
		if c := cond(m, v1alpha1.MemberReady); c != "True" {
			t.Errorf("east Ready: %s", c)
		}
		// Nothing new, within the interval: no write.
		rv := m.ResourceVersion
		w.tick(10 * time.Second)
		if err := east.sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w.member("east").ResourceVersion; got != rv {
			t.Error("a heartbeat that changed nothing within the interval was written")
		}
		w.tick(25 * time.Second)
		if err := east.sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w.member("east"); got.ResourceVersion == rv || !got.Status.LastSeen.Time.Equal(w.now()) {
			t.Errorf("a heartbeat after the interval: lastSeen %v, want %v", got.Status.LastSeen, w.now())
		}
		// Three intervals without a report: stale.
		w.tick(100 * time.Second)
		w.reconcile()
		if c := cond(w.member("east"), v1alpha1.MemberStale); c != "True" {
			t.Errorf("east Stale after 100 s: %s", c)
		}
	})

	refused := func(t *testing.T, cl *wire.Client, rep *wire.Report, status int, says string) {
		t.Helper()
		_, err := cl.Sync(ctx, rep)
		got, msg := refusal(t, err)
		if got != status || !strings.Contains(msg, says) {
			t.Errorf("%d %q, want %d saying %q", got, msg, status, says)
		}
	}
	t.Run("another member's report", func(t *testing.T) {
		refused(t, west.cl, &wire.Report{Member: "east", Created: w.now()}, 403, `the report is member "east"'s, not member west's`)
	})
	t.Run("another member's credential", func(t *testing.T) {
		_, secret, _ := wire.ParseCredential(west.cl.Credential)
		forged := &wire.Client{URL: w.url, Pin: w.pin, Credential: "east." + secret}
		refused(t, forged, &wire.Report{Member: "east", Created: w.now()}, 401, "the credential is not member east's")
	})
	t.Run("no credential", func(t *testing.T) {
		status, msg := w.post(wire.PathSync, "", []byte(`{}`))
		if status != 401 || !strings.Contains(msg, "no member credential") {
			t.Errorf("%d %q", status, msg)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		if err := w.c.Revoke(ctx, "west"); err != nil {
			t.Fatal(err)
		}
		refused(t, west.cl, west.report(), 403, "member west is revoked")
		if _, err := w.c.Desired(ctx, "west"); err == nil {
			t.Error("a revoked member has a desired state")
		}
		if err := w.c.Revoke(ctx, "nobody"); err == nil || !strings.Contains(err.Error(), "nobody") {
			t.Errorf("revoke an unknown member: %v", err)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		if err := w.kc.Delete(ctx, w.member("east")); err != nil {
			t.Fatal(err)
		}
		refused(t, east.cl, east.report(), 403, "member east is not in the fleet")
		status, _ := w.post(wire.PathBundle, east.cl.Credential, mustJSON(t, wire.BundleRequest{Repository: "apps/app", Digest: v1.Root().Digest.String()}))
		if status != 403 {
			t.Errorf("bundle for a deleted member: %d", status)
		}
	})
}

func cond(m *v1alpha1.Member, typ string) string {
	for _, c := range m.Status.Conditions {
		if c.Type == typ {
			return string(c.Status)
		}
	}
	return ""
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRun: Run reconciles as soon as a promotion or a member's report
// changes something, and returns when its context ends.
func TestRun(t *testing.T) {
	w := newWorld(t)
	v1 := w.push(pkgBuild(t, "app", "1.0.0", map[string][]byte{}), "apps/app:1.0.0").Root().Digest.String()
	w.place("app", "apps/app", "stable", nil, "", v1alpha1.Strategy{})
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.c.Run(ctx) }()
	wait := func(what string, ok func(*v1alpha1.Placement) bool) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < 10*time.Second {
			if ok(w.placement("app")) {
				return time.Since(start)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s: not within 10 s: %+v", what, w.placement("app").Status)
		return 0
	}
	if _, err := w.c.Promote(t.Context(), "app", "stable", "1.0.0", "alice"); err != nil {
		t.Fatal(err)
	}
	promoted := wait("the promotion seen", func(p *v1alpha1.Placement) bool { return p.Status.Digest == v1 })
	for range 2 { // given it, then reporting it Ready
		if err := m.sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ready := wait("the rollout complete", func(p *v1alpha1.Placement) bool { return p.Status.Phase == v1alpha1.PhaseComplete })
	t.Logf("Run saw the promotion after %s, the member's Ready report after %s", promoted.Round(time.Millisecond), ready.Round(time.Millisecond))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Run did not return when its context ended")
	}
}

// BenchmarkSync: heartbeats of 100 members over real TLS (keep-alive
// connections), each a report of one package and the desired state
// answered; the management cluster is the fake client, so this measures
// the centre's own work, not an API server's.
func BenchmarkSync(b *testing.B) {
	w := newWorld(b)
	w.push(pkgBuild(b, "app", "1.0.0", map[string][]byte{}), "apps/app:1.0.0")
	w.place("app", "apps/app", "stable", nil, `{"replicas":2}`, v1alpha1.Strategy{})
	if _, err := w.c.Promote(b.Context(), "app", "stable", "1.0.0", "bench"); err != nil {
		b.Fatal(err)
	}
	ms := w.fleetOf(100, "")
	w.reconcile()
	for _, m := range ms {
		if err := m.sync(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := ms[next.Add(1)%int64(len(ms))]
			if err := m.sync(b.Context()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
