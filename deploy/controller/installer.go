package controller

import (
	"context"

	"github.com/opencontainers/go-digest"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
)

// Installer is what the Reconciler does to the cluster once a package is
// verified: install it, and remove it when its Package is deleted. The
// Reconciler's default is deploy.Install and deploy.Remove; another one
// lets the state machine run without Helm or a cluster (its tests).
type Installer interface {
	// Install installs the package cfg, whose root is in the in-cluster
	// registry, as deploy.Install does.
	Install(ctx context.Context, cfg *artifact.Config, root digest.Digest, opts deploy.InstallOptions) (*deploy.Record, error)
	// Remove removes package name, as deploy.Remove does: a package with
	// no record is an error that wraps deploy.ErrNotDeployed.
	Remove(ctx context.Context, name string, opts deploy.RemoveOptions) (*deploy.RemoveResult, error)
	// CollectGarbage garbage-collects the registry after removals made with
	// opts.DeferGC, as deploy.CollectGarbage does.
	CollectGarbage(ctx context.Context, opts deploy.RemoveOptions) (deploy.Storage, error)
}

// clusterInstaller is the default Installer: deploy.Install and
// deploy.Remove through a Clientset.
type clusterInstaller struct{ cs kubernetes.Interface }

func (c clusterInstaller) Install(ctx context.Context, cfg *artifact.Config, root digest.Digest, opts deploy.InstallOptions) (*deploy.Record, error) {
	return deploy.Install(ctx, c.cs, cfg, root, opts)
}

func (c clusterInstaller) Remove(ctx context.Context, name string, opts deploy.RemoveOptions) (*deploy.RemoveResult, error) {
	return deploy.Remove(ctx, c.cs, name, opts)
}

func (c clusterInstaller) CollectGarbage(ctx context.Context, opts deploy.RemoveOptions) (deploy.Storage, error) {
	return deploy.CollectGarbage(ctx, c.cs, opts)
}

var _ Installer = clusterInstaller{}

// installer is r.Installer, or deploy's through r.Clientset.
func (r *Reconciler) installer() Installer {
	if r.Installer != nil {
		return r.Installer
	}
	return clusterInstaller{cs: r.Clientset}
}
