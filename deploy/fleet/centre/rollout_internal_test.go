package centre

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

func TestPlanWaves(t *testing.T) {
	members := func(n int, canaries ...string) []*v1alpha1.Member {
		var ms []*v1alpha1.Member
		for i := range n {
			m := &v1alpha1.Member{}
			m.Name = fmt.Sprintf("m%02d", i)
			for _, c := range canaries {
				if c == m.Name {
					m.Labels = map[string]string{v1alpha1.LabelCanary: "true"}
				}
			}
			ms = append(ms, m)
		}
		return ms
	}
	waves := func(ms []*v1alpha1.Member, s v1alpha1.Strategy, one bool) string {
		w := planWaves(ms, s, one)
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprint(w[m.Name]))
		}
		return strings.Join(out, "")
	}
	zero, two := int32(0), int32(2)
	for _, tc := range []struct {
		name string
		ms   []*v1alpha1.Member
		s    v1alpha1.Strategy
		one  bool
		want string
	}{
		{"defaults: the first by name, then a quarter (3 of 10)", members(10), v1alpha1.Strategy{}, false, "0111222333"},
		{"labelled canaries", members(10, "m04", "m09"), v1alpha1.Strategy{}, false, "1112022330"},
		{"no canary", members(4), v1alpha1.Strategy{Canaries: &zero}, false, "0123"},
		{"two canaries, halves", members(6), v1alpha1.Strategy{Canaries: &two, WaveFraction: 50}, false, "001112"},
		{"all at once after the canary", members(5), v1alpha1.Strategy{WaveFraction: 100}, false, "01111"},
		{"one member", members(1), v1alpha1.Strategy{}, false, "0"},
		{"one wave", members(5), v1alpha1.Strategy{}, true, "00000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waves(tc.ms, tc.s, tc.one); got != tc.want {
				t.Errorf("waves %s, want %s", got, tc.want)
			}
		})
	}
}

// TestRolloutSteps: a member joining mid-rollout waits in the last wave;
// a new version supersedes a rollout in progress; a member leaving the
// groups leaves the placement; history keeps MaxHistory records.
func TestRolloutSteps(t *testing.T) {
	d := func(i int) string { return "sha256:" + strings.Repeat(fmt.Sprint(i), 64) }
	track := &v1alpha1.ReleaseTrack{Spec: v1alpha1.ReleaseTrackSpec{Repository: "apps/app", Channels: []v1alpha1.Channel{{Name: "stable", Digest: d(1)}}}}
	track.Name = "app"
	p := &v1alpha1.Placement{Spec: v1alpha1.PlacementSpec{Track: "app", Channel: "stable", Targets: []v1alpha1.PlacementTarget{{Group: "all"}}}}
	p.Name = "app"
	f := &fleet{tracks: map[string]*v1alpha1.ReleaseTrack{"app": track}, selectors: map[string]labels.Selector{"all": labels.Everything()}}
	add := func(name string) {
		m := v1alpha1.Member{Spec: v1alpha1.MemberSpec{Mode: v1alpha1.Connected}, Status: v1alpha1.MemberStatus{Credential: "x"}}
		m.Name = name
		f.members = append(f.members, m)
	}
	for i := range 4 {
		add(fmt.Sprintf("m%d", i))
	}
	now := time.Unix(1e9, 0)
	// Each member runs what it is given, Ready.
	settle := func() {
		for i := range f.members {
			m := &f.members[i]
			m.Status.Packages = nil
			if dg := digestFor(p, m); dg != "" {
				m.Status.Packages = []v1alpha1.MemberPackage{{Name: "app", Placement: "app", Digest: dg, Ready: true}}
			}
		}
	}
	step := func() {
		now = now.Add(time.Minute)
		(&rollout{f: f, p: p, now: now}).step()
		settle()
	}
	step()
	step()
	if p.Status.Phase != v1alpha1.PhaseComplete || p.Status.Current != d(1) {
		t.Fatalf("first rollout: %+v", p.Status)
	}

	track.Spec.Channels[0].Digest = d(2)
	step() // the canary m0 given d(2)
	if p.Status.Wave != 0 || p.Status.Members[0].Target != d(2) || p.Status.Members[1].Target != d(1) {
		t.Fatalf("the canary's wave: %+v", p.Status)
	}
	step() // the canary Ready: the next wave given d(2)
	if p.Status.Wave != 1 || p.Status.Members[1].Target != d(2) {
		t.Fatalf("after the canary: %+v", p.Status)
	}
	add("m4") // joins: last wave, the current version meanwhile
	step()
	if pm := p.Status.Members[4]; pm.Name != "m4" || pm.Wave != lastWave(p.Status.Members) || (pm.Target != d(1) && p.Status.Wave < pm.Wave) {
		t.Errorf("m4 joined as %+v at wave %d", pm, p.Status.Wave)
	}
	track.Spec.Channels[0].Digest = d(3) // supersedes the rollout to d(2)
	step()
	h := p.Status.History
	if h[1].To != d(2) || h[1].Result != v1alpha1.PhaseHalted || !strings.Contains(h[1].Message, "superseded by the rollout to "+d(3)) || h[0].From != d(1) {
		t.Errorf("history: %+v", h[:2])
	}
	f.members = f.members[:len(f.members)-1] // m4 leaves
	for range 10 {
		step()
	}
	if p.Status.Phase != v1alpha1.PhaseComplete || p.Status.Current != d(3) || p.Status.Previous != d(1) || len(p.Status.Members) != 4 {
		t.Errorf("after the rollout to d(3): %+v", p.Status)
	}

	// A new version asked for after every member reached the one in
	// progress, before a pass saw it: that rollout is complete, not
	// superseded, and it is what a rollback returns to.
	track.Spec.Channels[0].Digest = d(4)
	given := func() bool {
		for _, pm := range p.Status.Members {
			if pm.Target != d(4) {
				return false
			}
		}
		return true
	}
	for i := 0; i < 10 && !given(); i++ {
		step() // wave by wave
	}
	if p.Status.Phase != v1alpha1.PhaseProgressing || p.Status.Current != d(3) || !given() {
		t.Fatalf("rollout to d(4): %+v", p.Status)
	}
	track.Spec.Channels[0].Digest = d(5) // every member Ready at d(4) meanwhile
	step()
	h = p.Status.History
	if h[0].To != d(5) || h[1].To != d(4) || h[1].Result != v1alpha1.PhaseComplete || p.Status.Current != d(4) || p.Status.Previous != d(3) {
		t.Errorf("a rollout reached before it was superseded: current %s previous %s, history %+v", p.Status.Current, p.Status.Previous, h[:2])
	}
	for i := 4; i < 30; i++ {
		track.Spec.Channels[0].Digest = d(i % 10)
		for range 8 {
			step()
		}
	}
	if len(p.Status.History) != MaxHistory {
		t.Errorf("%d history records, want %d", len(p.Status.History), MaxHistory)
	}
}
