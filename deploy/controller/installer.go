package controller

import (
	"context"

	"github.com/opencontainers/go-digest"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/rollout"
)

// Installer is what the Reconciler does to the cluster once a package is
// verified: roll it out, and uninstall it when its Package is deleted. The
// Reconciler's default is rollout.Apply and rollout.Uninstall; another one
// lets the state machine run without Helm or a cluster (its tests).
type Installer interface {
	// Apply rolls out the package cfg, whose root is in the in-cluster
	// registry, as rollout.Apply does.
	Apply(ctx context.Context, cfg *artifact.Config, root digest.Digest, opts rollout.ApplyOptions) (*rollout.Record, error)
	// Uninstall removes package name, as rollout.Uninstall does: a package
	// with no record is an error that wraps rollout.ErrNotDeployed.
	Uninstall(ctx context.Context, name string, opts rollout.UninstallOptions) (*rollout.UninstallResult, error)
	// CollectGarbage garbage-collects the registry after removals made with
	// opts.DeferGC, as rollout.CollectGarbage does.
	CollectGarbage(ctx context.Context, opts rollout.UninstallOptions) (rollout.Storage, error)
}

// clusterInstaller is the default Installer: rollout.Apply and
// rollout.Uninstall through a Clientset.
type clusterInstaller struct{ cs kubernetes.Interface }

func (c clusterInstaller) Apply(ctx context.Context, cfg *artifact.Config, root digest.Digest, opts rollout.ApplyOptions) (*rollout.Record, error) {
	return rollout.Apply(ctx, c.cs, cfg, root, opts)
}

func (c clusterInstaller) Uninstall(ctx context.Context, name string, opts rollout.UninstallOptions) (*rollout.UninstallResult, error) {
	return rollout.Uninstall(ctx, c.cs, name, opts)
}

func (c clusterInstaller) CollectGarbage(ctx context.Context, opts rollout.UninstallOptions) (rollout.Storage, error) {
	return rollout.CollectGarbage(ctx, c.cs, opts)
}

var _ Installer = clusterInstaller{}

// installer is r.Installer, or rollout's through r.Clientset.
func (r *Reconciler) installer() Installer {
	if r.Installer != nil {
		return r.Installer
	}
	return clusterInstaller{cs: r.Clientset}
}
