package centre

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// Reconcile makes one pass over the fleet: each placement's rollout
// steps as far as its members' reports allow, each group counts its
// members, and each member's Stale and Ready conditions are set. Only what
// changed is written; a write that conflicts with another (a member's
// report) is left for the next pass.
func (c *Centre) Reconcile(ctx context.Context) error {
	f, err := c.load(ctx, true)
	if err != nil {
		return err
	}
	now := c.now()
	var errs []error
	for i := range f.placements {
		errs = append(errs, c.reconcilePlacement(ctx, f, &f.placements[i], now))
	}
	for i := range f.groups {
		errs = append(errs, c.reconcileGroup(ctx, f, &f.groups[i]))
	}
	// Members' conditions last, several at a time: a rollout's start
	// flips every member's Ready, and a pass must not keep the next
	// one's placements waiting behind 1,000 writes in a row.
	merrs := make([]error, len(f.members))
	sem := make(chan struct{}, memberWriters)
	var wg sync.WaitGroup
	for i := range f.members {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			merrs[i] = c.reconcileMember(ctx, f, &f.members[i], now)
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, merrs...)...)
}

// memberWriters bounds the members' status writes of a pass in flight.
const memberWriters = 16

// reconcilePlacement steps p's rollout and writes its status if it
// changed.
func (c *Centre) reconcilePlacement(ctx context.Context, f *fleet, p *v1alpha1.Placement, now time.Time) error {
	before := p.Status.DeepCopy()
	ro := &rollout{f: f, p: p, now: now}
	ro.step()
	if apiequality.Semantic.DeepEqual(before, &p.Status) {
		return nil
	}
	if p.Status.Phase != before.Phase || p.Status.Wave != before.Wave || p.Status.Digest != before.Digest {
		c.log().Info("fleet rollout", "placement", p.Name, "digest", p.Status.Digest, "version", p.Status.Version,
			"phase", p.Status.Phase, "wave", p.Status.Wave, "message", p.Status.Message)
	}
	return c.writeStatus(ctx, p, "placement")
}

// reconcileGroup counts the (unrevoked) members g selects.
func (c *Centre) reconcileGroup(ctx context.Context, f *fleet, g *v1alpha1.MemberGroup) error {
	var names []string
	for i := range f.members {
		if m := &f.members[i]; !m.Spec.Revoked && f.selects(g.Name, m) {
			names = append(names, m.Name)
		}
	}
	if g.Status.Count == len(names) && slices.Equal(g.Status.Members, names) {
		return nil
	}
	g.Status.Count, g.Status.Members = len(names), names
	return c.writeStatus(ctx, g, "group")
}

// reconcileMember sets m's conditions: Stale (a connected member without
// a report for StaleAfter heartbeats) and Ready (every package placed on
// it runs Ready at its target).
func (c *Centre) reconcileMember(ctx context.Context, f *fleet, m *v1alpha1.Member, now time.Time) error {
	if m.Spec.Revoked {
		return nil
	}
	before := m.Status.DeepCopy()
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: m.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if m.Spec.Mode == v1alpha1.Carried {
		meta.RemoveStatusCondition(&m.Status.Conditions, v1alpha1.MemberStale)
	} else {
		interval := c.interval()
		if m.Status.Interval != nil && m.Status.Interval.Duration > 0 {
			interval = m.Status.Interval.Duration
		}
		last := m.Status.LastSeen
		if last == nil {
			last = m.Status.JoinedAt
		}
		switch {
		case last == nil:
			set(v1alpha1.MemberStale, true, "NeverSeen", "no report yet")
		case now.Sub(last.Time) > StaleAfter*interval:
			set(v1alpha1.MemberStale, true, "NoHeartbeat", fmt.Sprintf("no report since %s (%d heartbeats of %s)", last.UTC().Format(time.RFC3339), StaleAfter, interval))
		default:
			set(v1alpha1.MemberStale, false, "Heartbeat", fmt.Sprintf("it reports every %s", interval))
		}
	}
	var behind []string
	for _, dp := range f.desiredFor(m, 0).Packages {
		if rp := reported(m, dp.Placement, dp.Name); rp == nil || rp.Digest != dp.Digest || !rp.Ready {
			behind = append(behind, dp.Name)
		}
	}
	if len(behind) == 0 {
		set(v1alpha1.MemberReady, true, "AllReady", "every package placed on it runs Ready at its target")
	} else {
		set(v1alpha1.MemberReady, false, "NotReady", strings.Join(behind, ", ")+" not Ready at the target")
	}
	if apiequality.Semantic.DeepEqual(before, &m.Status) {
		return nil
	}
	return c.writeStatus(ctx, m, "member")
}

// writeStatus writes obj's status; a conflict or a deletion meanwhile is
// left for the next pass.
func (c *Centre) writeStatus(ctx context.Context, obj client.Object, kind string) error {
	err := c.Client.Status().Update(ctx, obj)
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("write %s %s's status: %w", kind, obj.GetName(), err)
}

// member is the member named name, or nil.
func (f *fleet) member(name string) *v1alpha1.Member {
	i, ok := slices.BinarySearchFunc(f.members, name, func(m v1alpha1.Member, n string) int { return strings.Compare(m.Name, n) })
	if !ok {
		return nil
	}
	return &f.members[i]
}

// packageOf is the Package's name p places.
func (f *fleet) packageOf(p *v1alpha1.Placement) string {
	if t := f.tracks[p.Spec.Track]; t != nil {
		return t.PackageName()
	}
	return ""
}

// placed are the members p's rollout counts, by name: connected, joined,
// not revoked, and selected by one of its targets.
func (f *fleet) placed(p *v1alpha1.Placement) []*v1alpha1.Member {
	var out []*v1alpha1.Member
	for i := range f.members {
		m := &f.members[i]
		if m.Spec.Mode == v1alpha1.Carried || m.Spec.Revoked || m.Status.Credential == "" {
			continue
		}
		if _, ok := f.target(p, m); ok {
			out = append(out, m)
		}
	}
	return out
}
