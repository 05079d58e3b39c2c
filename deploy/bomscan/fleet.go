package bomscan

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
	"k8s.io/apimachinery/pkg/api/meta"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// Fleet is a scanner of the SBOMs of every package version the release
// tracks of a fleet's centre hold (on a channel, or promoted once and still
// in the centre's registry reg), in the centre's namespace ns of the
// management cluster c; each located at the members that report running
// that version ("member NAME"). The index is kept in reg
// (bomscan.FleetIndexRepository, tag bomscan.IndexTag).
func Fleet(c client.Client, ns string, reg registry.Registry) *bomscan.Scanner {
	return &bomscan.Scanner{
		Source: &fleetSource{c: c, ns: ns, reg: reg},
		Store:  &lazyStore{reg: reg, repo: bomscan.FleetIndexRepository, pin: configMapPin{c: c, ns: ns}},
	}
}

type fleetSource struct {
	c   client.Client
	ns  string
	reg registry.Registry
}

func (s *fleetSource) SBOMs(ctx context.Context) ([]bomscan.SBOMRef, error) {
	var tracks fleetv1.ReleaseTrackList
	if err := s.c.List(ctx, &tracks, client.InNamespace(s.ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list ReleaseTracks: %w", err)
	}
	var members fleetv1.MemberList
	if err := s.c.List(ctx, &members, client.InNamespace(s.ns)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("list Members: %w", err)
	}
	runs := map[digest.Digest][]string{}
	for _, m := range members.Items {
		for _, p := range m.Status.Packages {
			if d, err := digest.Parse(p.Digest); err == nil {
				runs[d] = append(runs[d], "member "+m.Name)
			}
		}
	}
	for d := range runs {
		slices.Sort(runs[d])
		runs[d] = slices.Compact(runs[d])
	}
	var refs []bomscan.SBOMRef
	read := 0
	for _, tr := range tracks.Items {
		type version struct {
			d        digest.Digest
			promoted bool // only in the history: may be gone from the registry
		}
		var vs []version
		seen := map[digest.Digest]bool{}
		for _, ch := range tr.Spec.Channels {
			if d, err := digest.Parse(ch.Digest); err == nil && !seen[d] {
				seen[d] = true
				vs = append(vs, version{d: d})
			}
		}
		for _, p := range tr.Status.Promotions {
			if d, err := digest.Parse(p.Digest); err == nil && !seen[d] {
				seen[d] = true
				vs = append(vs, version{d: d, promoted: true})
			}
		}
		repo, err := s.reg.Repository(ctx, tr.Spec.Repository)
		if err != nil {
			return nil, fmt.Errorf("track %s: %w", tr.Name, err)
		}
		for _, v := range vs {
			if read++; read > bomscan.MaxPackages {
				return nil, fmt.Errorf("more than %d package versions on the tracks", bomscan.MaxPackages)
			}
			where := runs[v.d]
			more, err := bomscan.PackageSBOMs(ctx, repo, v.d.String(), func(artifact.Image, artifact.SBOM) []string { return slices.Clone(where) })
			if v.promoted && errors.Is(err, errdef.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("track %s, %s@%s: %w", tr.Name, tr.Spec.Repository, v.d, err)
			}
			if refs = append(refs, more...); len(refs) > bomscan.MaxSBOMs {
				return nil, fmt.Errorf("the tracks' versions carry more than %d SBOMs", bomscan.MaxSBOMs)
			}
		}
	}
	return refs, nil
}
