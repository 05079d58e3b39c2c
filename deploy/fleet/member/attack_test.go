package member

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestHandDeployedPackage: a centre that places a package of the name of
// one the site deployed by hand does not get it: the agent neither
// deploys over it nor, once it is placed no more, deletes it. The
// refusal is reported, and nothing is asked for.
func TestHandDeployedPackage(t *testing.T) {
	ctx := context.Background()
	ours := newSigner(t)
	v1, v1d := buildPackage(t, "app", "1.0.0", "a = 1\n", ours)
	v2, v2d := buildPackage(t, "app", "2.0.0", "a = 2\n", ours)
	c := newCentre(t)
	c.set(func(c *centre) { c.packages[v1d], c.packages[v2d] = v1, v2 })
	m := newMember(t, ours.pub)
	a := joined(t, c, m)
	manual := &pkgapi.Package{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: map[string]string{"team": "site"}},
		Spec: pkgapi.PackageSpec{Repository: "app", Digest: v1d}}
	if err := m.pc.Create(ctx, manual); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{v2d, v1d} {
		c.set(func(c *centre) {
			c.desired = wire.Desired{Generation: d, IntervalSeconds: 30, Packages: []wire.DesiredPackage{{Name: "app", Placement: "web", Repository: "apps/app", Digest: d}}}
		})
		syncOnce(t, a)
		syncOnce(t, a)
		p := m.pkg(t, "app")
		if p == nil || p.Spec.Digest != v1d || p.Labels[LabelPlacement] != "" {
			t.Fatalf("the hand-deployed Package after %s was placed: %+v", d, p)
		}
		got := reported(t, c.lastReport(), "app")
		if !got.Refused || got.Reason != ReasonNotPlaced || !strings.Contains(got.Message, "Package app of namespace "+ns+" was not put there by the fleet") || got.Target != d {
			t.Fatalf("reported %+v", got)
		}
	}
	c.set(func(c *centre) { c.desired = wire.Desired{Generation: "none", IntervalSeconds: 30} })
	syncOnce(t, a)
	if p := m.pkg(t, "app"); p == nil {
		t.Fatal("the hand-deployed Package was deleted once no placement wanted it")
	}
	if _, _, _, bundles := c.count(); bundles != 0 {
		t.Errorf("%d bundles asked for a package the agent does not own", bundles)
	}
}

// TestStalledCentre: a centre (or the network to it) that stops in the
// middle of an answer does not hold the agent: a join or sync whose
// answer does not come in within the agent's RequestTimeout, and a bundle
// that makes no progress for its StallTimeout, fail in one line, and the
// spool is left empty.
func TestStalledCentre(t *testing.T) {
	ours := newSigner(t)
	_, appd := buildPackage(t, "app", "1.0.0", "a = 1\n", ours)
	stall := func(path string) func(w http.ResponseWriter, r *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != path {
				return false
			}
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"packages":[`))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return true
		}
	}
	t.Run("sync", func(t *testing.T) {
		c := newCentre(t)
		m := newMember(t, ours.pub)
		a := joined(t, c, m)
		a.RequestTimeout = time.Second
		c.set(func(c *centre) { c.front = stall(wire.PathSync) })
		start := time.Now()
		_, err := a.SyncOnce(context.Background())
		if err == nil || time.Since(start) > 10*time.Second || !oneLineMessage(err.Error()) || !strings.Contains(err.Error(), "no whole answer within 1s") {
			t.Fatalf("a stalled sync: %v after %v", err, time.Since(start))
		}
		t.Logf("a stalled sync: %v after %v", err, time.Since(start).Round(time.Millisecond))
	})
	t.Run("join", func(t *testing.T) {
		c := newCentre(t)
		m := newMember(t)
		c.set(func(c *centre) { c.front = stall(wire.PathJoin) })
		if err := WriteJoin(context.Background(), m.cs, ns, Config{URL: c.srv.URL, Token: c.token.String(), Name: "site-a"}); err != nil {
			t.Fatal(err)
		}
		a := m.agent(t)
		a.RequestTimeout = time.Second
		start := time.Now()
		a.step(context.Background())
		st, _ := ReadStatus(context.Background(), m.cs, ns)
		if st.Joined || !strings.Contains(st.Error, "no whole answer within 1s") || time.Since(start) > 10*time.Second {
			t.Fatalf("a stalled join: %+v after %v", st, time.Since(start))
		}
	})
	t.Run("bundle", func(t *testing.T) {
		c := newCentre(t)
		m := newMember(t, ours.pub)
		a := joined(t, c, m)
		a.StallTimeout = time.Second
		released := make(chan struct{})
		t.Cleanup(func() { close(released) })
		c.set(func(c *centre) {
			c.desired.Packages = []wire.DesiredPackage{{Name: "app", Placement: "p", Repository: "apps/app", Digest: appd}}
			c.bundleFn = func(w http.ResponseWriter, req wire.BundleRequest) {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(make([]byte, 4096))
				w.(http.Flusher).Flush()
				<-released
			}
		})
		start := time.Now()
		syncOnce(t, a)
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("a stalled bundle held the agent %v", took)
		}
		if left, _ := os.ReadDir(a.Spool); len(left) != 0 {
			t.Fatalf("the spool holds %d files", len(left))
		}
		syncOnce(t, a) // its report tells the failure; the retry waits
		if got := reported(t, c.lastReport(), "app"); got.Reason != ReasonDeployFailed || !strings.Contains(got.Message, "the centre sent no byte of the bundle for 1s") {
			t.Errorf("reported %+v", got)
		}
	})
}

// TestCentreRedirect: the agent does not follow a redirect of the centre's
// — not to another of its addresses, least of all to plain HTTP, where
// the pin is not checked and the join's token would travel in clear.
func TestCentreRedirect(t *testing.T) {
	var leaked atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(plain.Close)
	c := newCentre(t)
	m := newMember(t)
	c.set(func(c *centre) {
		c.front = func(w http.ResponseWriter, r *http.Request) bool {
			http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return true
		}
	})
	if err := WriteJoin(context.Background(), m.cs, ns, Config{URL: c.srv.URL, Token: c.token.String(), Name: "site-a"}); err != nil {
		t.Fatal(err)
	}
	a := m.agent(t)
	a.step(context.Background())
	st, _ := ReadStatus(context.Background(), m.cs, ns)
	if leaked.Load() != 0 {
		t.Fatalf("the join followed the redirect to %s: the token went in clear", plain.URL)
	}
	if st.Joined || !strings.Contains(st.Error, "307") {
		t.Errorf("a join answered with a redirect: %+v", st)
	}
}
