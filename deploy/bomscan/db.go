package bomscan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// ErrNoDB means no Package of the cluster carries advisories.
var ErrNoDB = errors.New("no advisory database is deployed in the cluster")

// ErrNoFleetDB means no channel of the centre's release tracks holds a
// package that carries advisories.
var ErrNoFleetDB = errors.New("no release track of the centre holds an advisory database on a channel")

// ClusterDB reads the advisory database deployed in the cluster: the one
// FindDB finds, read from the in-cluster registry reg by ReadDB. It
// verifies no signature: the controller verified the Package before
// installing it.
func ClusterDB(ctx context.Context, c client.Client, ns string, reg registry.Registry) (*advisory.DB, []artifact.Advisories, error) {
	repo, root, err := FindDB(ctx, c, ns, reg)
	if err != nil {
		return nil, nil, err
	}
	return ReadDB(ctx, reg, repo, root)
}

// FindDB finds the advisory database deployed in the cluster: of the
// Packages in namespace ns that carry advisories, the one whose newest
// record is newest (its ferry.json read from reg, checked against its
// digest; at most bomscan.MaxPackages (artifact/bomscan) Packages listed
// and read). It returns the Package's repository and root digest, or
// ErrNoDB when none carries any.
func FindDB(ctx context.Context, c client.Client, ns string, reg registry.Registry) (repository, root string, err error) {
	pkgs, err := listPackages(ctx, c, ns)
	if meta.IsNoMatchError(err) {
		return "", "", ErrNoDB
	}
	if err != nil {
		return "", "", err
	}
	var cands []dbCandidate
	for _, p := range pkgs {
		root := p.Status.Digest
		if root == "" {
			root = p.Spec.Digest
		}
		if root != "" {
			cands = append(cands, dbCandidate{what: "Package " + p.Namespace + "/" + p.Name, repo: p.Spec.Repository, root: root})
		}
	}
	best, err := newestDB(ctx, reg, cands)
	if errors.Is(err, errNoCandidate) {
		err = ErrNoDB
	}
	if err != nil {
		return "", "", err
	}
	return best.repo, best.root, nil
}

// FleetDB reads the fleet's advisory database from its centre: of the
// versions on the channels of the release tracks in namespace ns of the
// management cluster c, those that carry advisories, the one whose newest
// record is newest, read from the centre's registry reg (checked and
// bounded as ClusterDB's). A database reaches the centre as any package
// does (carried, pushed, promoted onto a track's channel). It returns
// ErrNoFleetDB when no channel holds one. It verifies no signature: a
// version is promoted once verified.
func FleetDB(ctx context.Context, c client.Client, ns string, reg registry.Registry) (*advisory.DB, []artifact.Advisories, error) {
	var tracks fleetv1.ReleaseTrackList
	if err := c.List(ctx, &tracks, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil, ErrNoFleetDB
		}
		return nil, nil, fmt.Errorf("list ReleaseTracks: %w", err)
	}
	var cands []dbCandidate
	for _, tr := range tracks.Items {
		seen := map[string]bool{}
		for _, ch := range tr.Spec.Channels {
			if ch.Digest != "" && !seen[ch.Digest] {
				seen[ch.Digest] = true
				cands = append(cands, dbCandidate{what: "track " + tr.Name + " channel " + ch.Name, repo: tr.Spec.Repository, root: ch.Digest})
			}
		}
	}
	best, err := newestDB(ctx, reg, cands)
	if errors.Is(err, errNoCandidate) {
		err = ErrNoFleetDB
	}
	if err != nil {
		return nil, nil, err
	}
	return ReadDB(ctx, reg, best.repo, best.root)
}

// ReadDB reads the advisory database of the package root in repository
// repo of reg: each layer checked against its digest, loaded within
// advisory.DefaultLimits.
func ReadDB(ctx context.Context, reg registry.Registry, repository, root string) (*advisory.DB, []artifact.Advisories, error) {
	repo, err := reg.Repository(ctx, repository)
	if err != nil {
		return nil, nil, err
	}
	return advisory.ReadPackage(ctx, repo, root, advisory.DefaultLimits)
}

// dbCandidate is a package version that may carry advisories: what it
// is (for errors), its repository in the registry and its root digest.
type dbCandidate struct{ what, repo, root string }

var errNoCandidate = errors.New("no candidate carries advisories")

// newestDB finds, of cands, the one carrying advisories whose newest
// record is newest (each ferry.json read from reg, checked against its
// digest); errNoCandidate if none carries any.
func newestDB(ctx context.Context, reg registry.Registry, cands []dbCandidate) (*dbCandidate, error) {
	var best *dbCandidate
	var bestNewest time.Time
	for i := range cands {
		cand := &cands[i]
		repo, err := reg.Repository(ctx, cand.repo)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cand.what, err)
		}
		cfg, _, err := artifact.ReadConfig(ctx, repo, cand.root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cand.what, err)
		}
		carries := false
		var newest time.Time
		for _, comp := range cfg.Components {
			for _, a := range comp.Advisories {
				carries = true
				if t, err := time.Parse(time.RFC3339, a.Modified); err == nil && t.After(newest) {
					newest = t
				}
			}
		}
		if carries && (best == nil || newest.After(bestNewest)) {
			best, bestNewest = cand, newest
		}
	}
	if best == nil {
		return nil, errNoCandidate
	}
	return best, nil
}
