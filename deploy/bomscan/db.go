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
)

// ErrNoDB means no Package of the cluster carries advisories.
var ErrNoDB = errors.New("no advisory database is deployed in the cluster")

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
	type candidate struct {
		repo, root string
		newest     time.Time
	}
	var best *candidate
	for _, p := range pkgs {
		root := p.Status.Digest
		if root == "" {
			root = p.Spec.Digest
		}
		if root == "" {
			continue
		}
		repo, err := reg.Repository(ctx, p.Spec.Repository)
		if err != nil {
			return "", "", fmt.Errorf("Package %s/%s: %w", p.Namespace, p.Name, err)
		}
		cfg, _, err := artifact.ReadConfig(ctx, repo, root)
		if err != nil {
			return "", "", fmt.Errorf("Package %s/%s: %w", p.Namespace, p.Name, err)
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
		if carries && (best == nil || newest.After(best.newest)) {
			best = &candidate{repo: p.Spec.Repository, root: root, newest: newest}
		}
	}
	if best == nil {
		return "", "", ErrNoDB
	}
	return best.repo, best.root, nil
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
