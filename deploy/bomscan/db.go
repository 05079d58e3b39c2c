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

// ClusterDB reads the advisory database deployed in the cluster: of the
// Packages in namespace ns that carry advisories, the one whose newest
// record is newest, read from the in-cluster registry reg (each layer
// checked against its digest, loaded within advisory.DefaultLimits), at
// most bomscan.MaxPackages (artifact/bomscan) of them listed and read. It
// returns ErrNoDB when none carries any. It verifies no signature: the
// controller verified the Package before installing it.
func ClusterDB(ctx context.Context, c client.Client, ns string, reg registry.Registry) (*advisory.DB, []artifact.Advisories, error) {
	pkgs, err := listPackages(ctx, c, ns)
	if meta.IsNoMatchError(err) {
		return nil, nil, ErrNoDB
	}
	if err != nil {
		return nil, nil, err
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
			return nil, nil, fmt.Errorf("Package %s/%s: %w", p.Namespace, p.Name, err)
		}
		cfg, _, err := artifact.ReadConfig(ctx, repo, root)
		if err != nil {
			return nil, nil, fmt.Errorf("Package %s/%s: %w", p.Namespace, p.Name, err)
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
		return nil, nil, ErrNoDB
	}
	repo, err := reg.Repository(ctx, best.repo)
	if err != nil {
		return nil, nil, err
	}
	return advisory.ReadPackage(ctx, repo, best.root, advisory.DefaultLimits)
}
