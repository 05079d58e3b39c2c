package centre

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// fleet is one read of the fleet's objects: what Desired and Reconcile
// work from.
type fleet struct {
	members    []v1alpha1.Member
	groups     []v1alpha1.MemberGroup
	tracks     map[string]*v1alpha1.ReleaseTrack
	placements []v1alpha1.Placement
	// selectors are the groups' selectors, parsed; a group whose selector
	// does not parse selects nothing.
	selectors map[string]labels.Selector
}

// load lists the fleet's groups, tracks and placements, and its members
// if withMembers.
func (c *Centre) load(ctx context.Context, withMembers bool) (*fleet, error) {
	in := client.InNamespace(c.ns())
	f := &fleet{tracks: map[string]*v1alpha1.ReleaseTrack{}, selectors: map[string]labels.Selector{}}
	var groups v1alpha1.MemberGroupList
	var tracks v1alpha1.ReleaseTrackList
	var placements v1alpha1.PlacementList
	for _, l := range []client.ObjectList{&groups, &tracks, &placements} {
		if err := c.Client.List(ctx, l, in); err != nil {
			return nil, fmt.Errorf("list the fleet's %T in namespace %s: %w", l, c.ns(), err)
		}
	}
	if withMembers {
		var members v1alpha1.MemberList
		if err := c.Client.List(ctx, &members, in); err != nil {
			return nil, fmt.Errorf("list the fleet's members in namespace %s: %w", c.ns(), err)
		}
		f.members = members.Items
		slices.SortFunc(f.members, func(a, b v1alpha1.Member) int { return strings.Compare(a.Name, b.Name) })
	}
	f.groups, f.placements = groups.Items, placements.Items
	slices.SortFunc(f.placements, func(a, b v1alpha1.Placement) int { return strings.Compare(a.Name, b.Name) })
	for i := range tracks.Items {
		f.tracks[tracks.Items[i].Name] = &tracks.Items[i]
	}
	for _, g := range f.groups {
		sel, err := metav1.LabelSelectorAsSelector(&g.Spec.Selector)
		if err != nil {
			sel = labels.Nothing()
		}
		f.selectors[g.Name] = sel
	}
	return f, nil
}

// selects tells whether group selects m.
func (f *fleet) selects(group string, m *v1alpha1.Member) bool {
	sel, ok := f.selectors[group]
	return ok && sel.Matches(labels.Set(m.Labels))
}

// target is the first target of p whose group selects m.
func (f *fleet) target(p *v1alpha1.Placement, m *v1alpha1.Member) (*v1alpha1.PlacementTarget, bool) {
	for i := range p.Spec.Targets {
		if f.selects(p.Spec.Targets[i].Group, m) {
			return &p.Spec.Targets[i], true
		}
	}
	return nil, false
}

// wanted is the digest p asks for: its pinned digest, else its track's
// channel's; why says what is missing when there is none.
func (f *fleet) wanted(p *v1alpha1.Placement) (d, version, why string) {
	t, ok := f.tracks[p.Spec.Track]
	if !ok {
		return "", "", fmt.Sprintf("track %s is not in the fleet", p.Spec.Track)
	}
	if p.Spec.Digest != "" {
		return p.Spec.Digest, versionOf(t, p, p.Spec.Digest), ""
	}
	if p.Spec.Channel == "" {
		return "", "", "it names neither a channel nor a digest"
	}
	for _, ch := range t.Spec.Channels {
		if ch.Name == p.Spec.Channel {
			return ch.Digest, ch.Version, ""
		}
	}
	return "", "", fmt.Sprintf("track %s has no channel %s", t.Name, p.Spec.Channel)
}

// versionOf is the version a track knows digest d by.
func versionOf(t *v1alpha1.ReleaseTrack, p *v1alpha1.Placement, d string) string {
	if t != nil {
		for _, ch := range t.Spec.Channels {
			if ch.Digest == d && ch.Version != "" {
				return ch.Version
			}
		}
		for _, pr := range t.Status.Promotions {
			if pr.Digest == d && pr.Version != "" {
				return pr.Version
			}
		}
	}
	if p != nil && p.Status.Digest == d {
		return p.Status.Version
	}
	return ""
}

// digestFor is the digest p gives member m now: a connected member its
// rollout's target for it (the placement's current version when the
// rollout has not reached it yet), a carried member the last version that
// completed. "" gives it nothing yet.
func digestFor(p *v1alpha1.Placement, m *v1alpha1.Member) string {
	if m.Spec.Mode != v1alpha1.Carried {
		for _, pm := range p.Status.Members {
			if pm.Name == m.Name {
				return pm.Target
			}
		}
	}
	return p.Status.Current
}

// desiredFor is m's desired state in f: for every placement whose targets
// select it, its package at the digest the rollout gives it, with the
// first matching target's values. Of two placements giving it packages of
// one name, the first by name wins.
func (f *fleet) desiredFor(m *v1alpha1.Member, interval int) *wire.Desired {
	d := &wire.Desired{IntervalSeconds: interval, Packages: []wire.DesiredPackage{}}
	names := map[string]bool{}
	for i := range f.placements {
		p := &f.placements[i]
		tg, ok := f.target(p, m)
		if !ok {
			continue
		}
		t, ok := f.tracks[p.Spec.Track]
		dg := digestFor(p, m)
		if !ok || dg == "" || names[t.PackageName()] {
			continue
		}
		names[t.PackageName()] = true
		dp := wire.DesiredPackage{
			Name: t.PackageName(), Placement: p.Name, Repository: t.Spec.Repository,
			Digest: dg, Version: versionOf(t, p, dg), Components: p.Spec.Components,
		}
		if tg.Values != nil && len(tg.Values.Raw) > 0 {
			dp.Values = tg.Values.Raw
		}
		if p.Spec.Timeout != nil {
			dp.TimeoutSeconds = int(p.Spec.Timeout.Seconds())
		}
		d.Packages = append(d.Packages, dp)
	}
	d.Generation = marshalGeneration(d)
	return d
}

// Desired is what member should run now (wire.Desired): what its sync is
// answered, and what a carried member's bundle carries. A revoked member
// has none (ErrRevoked).
func (c *Centre) Desired(ctx context.Context, member string) (*wire.Desired, error) {
	m, err := c.member(ctx, member)
	if err != nil {
		return nil, err
	}
	return c.desired(ctx, m)
}

func (c *Centre) desired(ctx context.Context, m *v1alpha1.Member) (*wire.Desired, error) {
	if m.Spec.Revoked {
		return nil, refuse(http.StatusForbidden, ErrRevoked, "member %s is revoked", m.Name)
	}
	f, err := c.load(ctx, false)
	if err != nil {
		return nil, err
	}
	return f.desiredFor(m, int(c.interval().Seconds())), nil
}
