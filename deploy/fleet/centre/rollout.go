package centre

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// Rollout actions (RolloutRecord.Action).
const (
	ActionRollout  = "rollout"
	ActionRollback = "rollback"
)

// A placed member's state (PlacedMember.State).
const (
	StatePending  = "Pending"
	StateUpdating = "Updating"
	StateReady    = "Ready"
	StateFailed   = "Failed"
	StateRefused  = "Refused"
)

// rollout is one step of a placement's rollout, worked out on its status
// in memory: what it asks for now, who it places on, which wave stands
// where. The caller writes the status if it changed.
type rollout struct {
	f   *fleet
	p   *v1alpha1.Placement
	now time.Time
}

// step moves p's rollout as far as the members' reports allow.
func (ro *rollout) step() {
	st := &ro.p.Status
	st.ObservedGeneration = ro.p.Generation
	want, version, why := ro.f.wanted(ro.p)
	if want == "" {
		st.Message = fmt.Sprintf("placement %s has no version to place: %s", ro.p.Name, why)
		return
	}
	if st.Message != "" && st.Phase != v1alpha1.PhaseHalted {
		st.Message = ""
	}
	members := ro.f.placed(ro.p)
	if want != st.Digest {
		ro.start(members, want, version)
	} else {
		ro.join(members)
	}
	switch st.Phase {
	case v1alpha1.PhaseProgressing:
		ro.advance()
	case v1alpha1.PhaseComplete:
		for i := range st.Members {
			st.Members[i].State, st.Members[i].Message = ro.state(&st.Members[i])
		}
	}
}

// start begins a rollout to want: the one in progress (if any) is
// recorded as superseded; members are put in waves, the first of which is
// given want at once; the others keep what they were given. The first
// rollout of a placement, a rollback, and a return to the current version
// go to everyone at once.
func (ro *rollout) start(members []*v1alpha1.Member, want, version string) {
	st := &ro.p.Status
	if len(st.History) > 0 && st.History[0].Result == v1alpha1.PhaseProgressing {
		if ro.reached() {
			// Every member already runs it, Ready: the pass that would
			// have said so had not run yet. Complete, so that it is the
			// version a rollback returns to.
			st.Previous, st.Current = st.Current, st.Digest
			ro.finish(v1alpha1.PhaseComplete, "")
		} else {
			ro.finish(v1alpha1.PhaseHalted, "superseded by the rollout to "+describe(want, version))
		}
	}
	given := map[string]string{}
	for _, pm := range st.Members {
		given[pm.Name] = pm.Target
	}
	rec := v1alpha1.RolloutRecord{Action: ActionRollout, From: st.Current, To: want, Version: version,
		By: ro.by(), Started: metav1.NewTime(ro.now), Result: v1alpha1.PhaseProgressing}
	if ro.p.Annotations[AnnotationRollback] == want {
		rec.Action = ActionRollback
		if st.Digest != "" {
			rec.From = st.Digest
		}
	}
	oneWave := st.Current == "" || want == st.Current || rec.Action == ActionRollback
	waves := planWaves(members, ro.p.Spec.Strategy, oneWave)
	st.Members = make([]v1alpha1.PlacedMember, 0, len(members))
	for _, m := range members {
		pm := v1alpha1.PlacedMember{Name: m.Name, Wave: waves[m.Name], Target: given[m.Name], State: StatePending}
		if pm.Target == "" {
			pm.Target = st.Current
		}
		st.Members = append(st.Members, pm)
	}
	st.Digest, st.Version = want, version
	st.Phase, st.Wave, st.Message = v1alpha1.PhaseProgressing, 0, ""
	st.History = append([]v1alpha1.RolloutRecord{rec}, st.History...)
	if len(st.History) > MaxHistory {
		st.History = st.History[:MaxHistory]
	}
	ro.give(0)
}

// join keeps the placed members as the groups select them: a member no
// longer selected (or revoked) leaves; a new one joins the last wave, with
// the version that wave has (the current one until the wave is reached,
// and while the rollout is halted).
func (ro *rollout) join(members []*v1alpha1.Member) {
	st := &ro.p.Status
	last := lastWave(st.Members)
	have := map[string]v1alpha1.PlacedMember{}
	for _, pm := range st.Members {
		have[pm.Name] = pm
	}
	out := make([]v1alpha1.PlacedMember, 0, len(members))
	for _, m := range members {
		pm, ok := have[m.Name]
		if !ok {
			pm = v1alpha1.PlacedMember{Name: m.Name, Wave: last, Target: st.Current, State: StatePending}
			if st.Phase == v1alpha1.PhaseProgressing && st.Wave >= last {
				pm.Target, pm.Since, pm.State = st.Digest, ro.since(), StateUpdating
			}
		}
		out = append(out, pm)
	}
	st.Members = out
}

// advance checks the current wave: a member that refused the version, or
// is not Ready at it within the strategy's readyTimeout of being given it,
// halts the rollout; when each is Ready the next wave is given the version,
// and after the last the rollout is complete.
func (ro *rollout) advance() {
	st := &ro.p.Status
	timeout := DefaultReadyTimeout
	if t := ro.p.Spec.Strategy.ReadyTimeout; t != nil && t.Duration > 0 {
		timeout = t.Duration
	}
	last := lastWave(st.Members)
	for {
		for i := range st.Members {
			if pm := &st.Members[i]; pm.Wave == st.Wave {
				pm.State, pm.Message = ro.state(pm)
			}
		}
		ready := true
		for i := range st.Members {
			pm := &st.Members[i]
			if pm.Wave != st.Wave || pm.State == StateReady {
				continue
			}
			what := describe(st.Digest, st.Version)
			switch {
			case pm.State == StateRefused:
				ro.halt(fmt.Sprintf("member %s refused %s: %s", pm.Name, what, pm.Message))
				return
			case pm.Since != nil && ro.now.Sub(pm.Since.Time) > timeout:
				late := timeout.String()
				if pm.Message != "" {
					late += ": " + pm.Message
				}
				pm.State, pm.Message = StateFailed, "not Ready within "+late
				ro.halt(fmt.Sprintf("member %s is not Ready at %s within %s", pm.Name, what, late))
				return
			}
			ready = false
		}
		if !ready {
			return
		}
		if st.Wave >= last {
			if st.Current != st.Digest {
				st.Previous, st.Current = st.Current, st.Digest
			}
			st.Phase = v1alpha1.PhaseComplete
			ro.finish(v1alpha1.PhaseComplete, "")
			return
		}
		st.Wave++
		ro.give(st.Wave)
	}
}

// reached reports whether every placed member has been given the
// rollout's version and runs it, Ready, as it last reported.
func (ro *rollout) reached() bool {
	st := &ro.p.Status
	if st.Digest == "" || st.Digest == st.Current {
		return false
	}
	for i := range st.Members {
		pm := &st.Members[i]
		if pm.Target != st.Digest {
			return false
		}
		if state, _ := ro.state(pm); state != StateReady {
			return false
		}
	}
	return len(st.Members) > 0
}

// give gives the rollout's version to the members of wave.
func (ro *rollout) give(wave int) {
	st := &ro.p.Status
	for i := range st.Members {
		if pm := &st.Members[i]; pm.Wave == wave {
			pm.Target, pm.Since, pm.State, pm.Message = st.Digest, ro.since(), StateUpdating, ""
		}
	}
}

// halt stops the rollout: nobody is given anything new until the
// placement asks for another version.
func (ro *rollout) halt(why string) {
	ro.p.Status.Phase, ro.p.Status.Message = v1alpha1.PhaseHalted, why
	ro.finish(v1alpha1.PhaseHalted, why)
}

// finish closes the newest history record with result and each member's
// outcome.
func (ro *rollout) finish(result, msg string) {
	st := &ro.p.Status
	if len(st.History) == 0 {
		return
	}
	h := &st.History[0]
	h.Result, h.Message, h.Finished = result, msg, ro.since()
	h.Members = h.Members[:0]
	for _, pm := range st.Members {
		o := pm.Name + ": " + pm.State
		if pm.State == StateFailed || pm.State == StateRefused {
			o += " (" + pm.Message + ")"
		}
		h.Members = append(h.Members, o)
	}
}

// state is where pm stands at its target, as its member last reported.
func (ro *rollout) state(pm *v1alpha1.PlacedMember) (string, string) {
	m := ro.f.member(pm.Name)
	if m == nil {
		return StateUpdating, "not reported"
	}
	rp := reported(m, ro.p.Name, ro.f.packageOf(ro.p))
	switch {
	case rp == nil:
		return StateUpdating, "not reported yet"
	case rp.Refused && rp.Target == pm.Target:
		return StateRefused, oneLine(rp.Reason + ": " + rp.Message)
	case rp.Digest == pm.Target && rp.Ready:
		return StateReady, ""
	case rp.Digest == pm.Target:
		return StateUpdating, rp.Message
	}
	return StateUpdating, ""
}

// by is who asked for the placement's version: the track's promoter when
// it follows a channel, else the placement's annotation.
func (ro *rollout) by() string {
	if ro.p.Spec.Digest == "" {
		if t := ro.f.tracks[ro.p.Spec.Track]; t != nil && t.Annotations[AnnotationBy] != "" {
			return t.Annotations[AnnotationBy]
		}
	}
	return ro.p.Annotations[AnnotationBy]
}

func (ro *rollout) since() *metav1.Time {
	t := metav1.NewTime(ro.now)
	return &t
}

// planWaves puts members in waves: the canaries (members labelled
// LabelCanary, else the first strategy.canaries by name) in wave 0, then
// waveFraction% of all the members per wave, by name; everyone in wave 0
// if oneWave.
func planWaves(members []*v1alpha1.Member, s v1alpha1.Strategy, oneWave bool) map[string]int {
	waves := map[string]int{}
	if oneWave {
		return waves
	}
	canary := map[string]bool{}
	for _, m := range members {
		if m.Labels[v1alpha1.LabelCanary] == "true" {
			canary[m.Name] = true
		}
	}
	if len(canary) == 0 {
		n := DefaultCanaries
		if s.Canaries != nil {
			n = int(*s.Canaries)
		}
		for _, m := range members[:min(n, len(members))] {
			canary[m.Name] = true
		}
	}
	frac := int(s.WaveFraction)
	if frac <= 0 || frac > 100 {
		frac = DefaultWaveFraction
	}
	size := max(1, int(math.Ceil(float64(frac)*float64(len(members))/100)))
	first := 0
	if len(canary) > 0 {
		first = 1
	}
	i := 0
	for _, m := range members {
		if !canary[m.Name] {
			waves[m.Name] = first + i/size
			i++
		}
	}
	return waves
}

func lastWave(pms []v1alpha1.PlacedMember) int {
	last := 0
	for _, pm := range pms {
		last = max(last, pm.Wave)
	}
	return last
}

// describe names a version by its version, else its digest.
func describe(d, version string) string {
	if version != "" {
		return "version " + version + " (" + d + ")"
	}
	return d
}

// reported is the package a member reported for placement p (by the
// placement it names, else by the package's name).
func reported(m *v1alpha1.Member, placement, pkg string) *v1alpha1.MemberPackage {
	var byName *v1alpha1.MemberPackage
	for i := range m.Status.Packages {
		rp := &m.Status.Packages[i]
		if rp.Placement == placement {
			return rp
		}
		if rp.Name == pkg && rp.Placement == "" {
			byName = rp
		}
	}
	return byName
}
