package centre_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
)

// fleetOf joins n simulated members m00…; canary is labelled a canary
// by the token it joins with.
func (w *world) fleetOf(n int, canary string) []*member {
	tok := w.token(centre.TokenOptions{Uses: n, Labels: map[string]string{"env": "prod"}})
	canaries := w.token(centre.TokenOptions{Labels: map[string]string{"env": "prod", v1alpha1.LabelCanary: "true"}})
	var ms []*member
	for i := range n {
		name := fmt.Sprintf("m%02d", i)
		t := tok
		if name == canary {
			t = canaries
		}
		ms = append(ms, w.join(name, t, nil))
	}
	return ms
}

// round has every member sync at once (each a goroutine speaking the
// protocol), then the centre reconcile once, a minute later.
func (w *world) round(ms []*member) {
	w.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ms))
	for i, m := range ms {
		wg.Go(func() { errs[i] = m.sync(w.t.Context()) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			w.t.Fatal(err)
		}
	}
	w.tick(time.Minute)
	w.reconcile()
	w.rounds++
}

// until runs rounds until the placement's rollout to d is no longer
// progressing; it returns, per member, the round it was first given d.
func (w *world) until(ms []*member, placement, d string) (*v1alpha1.Placement, map[string]int) {
	w.t.Helper()
	first := map[string]int{}
	for r := range 40 {
		w.round(ms)
		for _, m := range ms {
			if _, ok := first[m.name]; !ok && m.wasGiven(d) {
				first[m.name] = r
			}
		}
		if p := w.placement(placement); p.Status.Digest == d && p.Status.Phase != v1alpha1.PhaseProgressing {
			return p, first
		}
	}
	w.t.Fatalf("the rollout to %s did not end in 40 rounds: %+v", d, w.placement(placement).Status)
	return nil, nil
}

// TestRollout: ten simulated members; a new version goes to the canary
// first, then waves of a quarter of the fleet, each waiting for its
// members to report Ready; one member refusing it (or never Ready within
// readyTimeout) halts the rollout naming it, the later waves untouched;
// a rollback returns every member to the version before; the history
// records both, and who asked.
func TestRollout(t *testing.T) {
	v1 := pkgBuild(t, "app", "1.0.0", map[string][]byte{})
	v2 := pkgBuild(t, "app", "2.0.0", map[string][]byte{})
	for _, tc := range []struct {
		name    string
		fail    func(m *member, d string)
		timeout time.Duration
		says    string
	}{
		{"refused", func(m *member, d string) { m.refuse = d }, 0, "member m05 refused version 2.0.0 (%s): VerificationFailed: the signature is by none"},
		{"never ready", func(m *member, d string) { m.stuck = d }, 5 * time.Minute, "member m05 is not Ready at version 2.0.0 (%s) within 5m0s: waiting for Deployment app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			w := newWorld(t)
			ctx := t.Context()
			d1 := w.push(v1, "apps/app:1.0.0").Root().Digest.String()
			d2 := w.push(v2, "apps/app:2.0.0").Root().Digest.String()
			strategy := v1alpha1.Strategy{}
			if tc.timeout > 0 {
				strategy.ReadyTimeout = &metav1.Duration{Duration: tc.timeout}
			}
			w.place("app", "apps/app", "stable", map[string]string{"env": "prod"}, "", strategy)
			ms := w.fleetOf(10, "m03")
			if _, err := w.c.Promote(ctx, "app", "stable", "1.0.0", "alice"); err != nil {
				t.Fatal(err)
			}
			// The first rollout: everyone at once.
			p, first := w.until(ms, "app", d1)
			if p.Status.Phase != v1alpha1.PhaseComplete || p.Status.Current != d1 || len(first) != 10 {
				t.Fatalf("first rollout: %+v, given %v", p.Status, first)
			}
			for _, r := range first {
				if r != first["m00"] {
					t.Errorf("the first rollout went in waves: %v", first)
					break
				}
			}

			tc.fail(ms[5], d2)
			if _, err := w.c.Promote(ctx, "app", "stable", "sha256:"+strings.TrimPrefix(d2, "sha256:"), "bob"); err != nil {
				t.Fatal(err)
			}
			p, first = w.until(ms, "app", d2)
			// Waves: m03 (the labelled canary); m00-m02; m04-m06 (m05
			// fails); m07-m09 never reached.
			if p.Status.Phase != v1alpha1.PhaseHalted || !strings.HasPrefix(p.Status.Message, fmt.Sprintf(tc.says, d2)) {
				t.Errorf("halted: %s %q, want %q", p.Status.Phase, p.Status.Message, fmt.Sprintf(tc.says, d2))
			}
			if p.Status.Current != d1 || p.Status.Wave != 2 {
				t.Errorf("current %s wave %d", p.Status.Current, p.Status.Wave)
			}
			if !(first["m03"] < first["m00"] && first["m00"] == first["m01"] && first["m01"] == first["m02"] &&
				first["m02"] < first["m04"] && first["m04"] == first["m05"] && first["m05"] == first["m06"]) {
				t.Errorf("rounds each member was first given v2: %v", first)
			}
			for _, n := range []string{"m07", "m08", "m09"} {
				if _, ok := first[n]; ok {
					t.Errorf("%s, in a wave the halt never reached, was given v2", n)
				}
			}
			// Halted: more rounds give nobody anything new.
			w.round(ms)
			w.round(ms)
			for i, m := range ms {
				want := d2
				if i == 5 || i >= 7 {
					want = d1
				}
				if got := m.runs("app"); got != want && !(i == 5 && tc.timeout > 0 && got == d2) {
					t.Errorf("%s runs %s, want %s", m.name, got, want)
				}
			}
			if _, ok := first["m07"]; ok || ms[7].wasGiven(d2) {
				t.Error("a halted rollout went on")
			}

			// Roll back: everyone to v1, at once.
			if _, err := w.c.Rollback(ctx, "app", "carol"); err != nil {
				t.Fatal(err)
			}
			p, _ = w.until(ms, "app", d1)
			if p.Status.Phase != v1alpha1.PhaseComplete || p.Status.Current != d1 || p.Spec.Digest != d1 || p.Spec.Channel != "" {
				t.Errorf("after the rollback: spec %+v status %+v", p.Spec, p.Status)
			}
			w.round(ms)
			for _, m := range ms {
				if got := m.runs("app"); got != d1 {
					t.Errorf("%s runs %s after the rollback, want v1", m.name, got)
				}
			}
			h := p.Status.History
			if len(h) != 3 {
				t.Fatalf("history: %+v", h)
			}
			if h[0].Action != centre.ActionRollback || h[0].By != "carol" || h[0].From != d2 || h[0].To != d1 || h[0].Result != v1alpha1.PhaseComplete || h[0].Finished == nil || len(h[0].Members) != 10 {
				t.Errorf("history[0]: %+v", h[0])
			}
			if h[1].Action != centre.ActionRollout || h[1].By != "bob" || h[1].From != d1 || h[1].To != d2 || h[1].Version != "2.0.0" || h[1].Result != v1alpha1.PhaseHalted || !strings.Contains(h[1].Message, "m05") {
				t.Errorf("history[1]: %+v", h[1])
			}
			t.Logf("halted rollout: %s; members: %s", h[1].Message, strings.Join(h[1].Members, ", "))
			if !containsPrefix(h[1].Members, "m05: ") || !containsPrefix(h[1].Members, "m07: Pending") {
				t.Errorf("history[1]'s members: %v", h[1].Members)
			}
			if h[2].By != "alice" || h[2].To != d1 || h[2].Result != v1alpha1.PhaseComplete {
				t.Errorf("history[2]: %+v", h[2])
			}
			for _, m := range ms {
				if c := cond(w.member(m.name), v1alpha1.MemberReady); c != "True" {
					t.Errorf("%s Ready: %s", m.name, c)
				}
			}
			t.Logf("%s: 10 members, %d rounds (%d syncs) in %s", tc.name, w.rounds, w.hitsOf("/fleet/v1/sync"), time.Since(start).Round(time.Millisecond))
		})
	}
}

func containsPrefix(s []string, prefix string) bool {
	for _, v := range s {
		if strings.HasPrefix(v, prefix) {
			return true
		}
	}
	return false
}
