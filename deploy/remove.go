package deploy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Remove is the one way packages are removed, Deploy's counterpart (set
// the fields, then Run): `ferry remove` and the tests run it. The Package
// controller does the cluster's half (rollout.Uninstall).
type Remove struct {
	// Client reaches the cluster's core API; Packages its Package API
	// (PackageClient); Kube is what a removal run by this process uses for
	// Helm, deletes and the exec into a registry Pod.
	Client   kubernetes.Interface
	Packages client.WithWatch
	Kube     genericclioptions.RESTClientGetter
	// Namespace is ferry's namespace; cluster.DefaultNamespace if empty.
	Namespace string
	// Timeout bounds each uninstall and wait of a removal run by this
	// process; rollout.DefaultTimeout if 0.
	Timeout time.Duration
	// Registry is where this process reaches the in-cluster registry
	// (host:port, e.g. a tunnel's local address from package
	// internal/reach); the registry's address on the nodes if empty.
	Registry string
	// Progress, if set, receives an event per step of a removal run by
	// this process.
	Progress artifact.ProgressFunc
}

// Run removes the packages names: the Packages among them are deleted at
// once and waited for (the controller removes what they installed, with
// one garbage collection for all), then the packages recorded by an
// earlier ferry that no Package holds are removed by this process
// (rollout.Uninstall), with one garbage collection for them. The results
// are in the order of names.
func (r *Remove) Run(ctx context.Context, names []string) ([]*rollout.UninstallResult, error) {
	if r.Namespace == "" {
		r.Namespace = cluster.DefaultNamespace
	}
	results := make([]*rollout.UninstallResult, len(names))
	found := make([]bool, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { results[i], found[i], errs[i] = RemovePackage(ctx, r.Packages, r.Namespace, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !slices.Contains(found, false) {
		return results, nil
	}
	// Records no Package holds.
	opts := rollout.UninstallOptions{
		Namespace: r.Namespace, Kube: r.Kube, Timeout: r.Timeout, Registry: r.Registry,
		Progress: r.Progress, DeferGC: true,
	}
	var bare []*rollout.UninstallResult
	for i, name := range names {
		if found[i] {
			continue
		}
		res, err := rollout.Uninstall(ctx, r.Client, name, opts)
		if err != nil {
			return nil, err
		}
		results[i] = res
		bare = append(bare, res)
	}
	storage, err := rollout.CollectGarbage(ctx, r.Client, opts)
	if err != nil {
		return nil, err
	}
	for _, res := range bare {
		res.Storage = storage
	}
	return results, nil
}

// RemovePackage deletes the Package name and waits until the controller
// has removed what it installed (DeletePackage); it returns what the
// controller reported removing. ok is false when there was no such Package.
func RemovePackage(ctx context.Context, c client.WithWatch, ns, name string) (res *rollout.UninstallResult, ok bool, err error) {
	removal, ok, err := DeletePackage(ctx, c, ns, name)
	if err != nil || !ok {
		return nil, ok, err
	}
	return removedPackage(name, removal), true, nil
}

// removedPackage is what the controller reported removing for a Package.
func removedPackage(name string, st *v1alpha1.RemovalStatus) *rollout.UninstallResult {
	res := &rollout.UninstallResult{Name: name, Releases: []rollout.Release{}, Objects: []rollout.Object{}, Images: []string{}, Kept: []string{}}
	if st == nil {
		return res
	}
	for _, r := range st.Releases {
		res.Releases = append(res.Releases, rollout.Release{Namespace: r.Namespace, Name: r.Name, Chart: r.Chart, Revision: r.Revision})
	}
	for _, o := range st.Objects {
		res.Objects = append(res.Objects, rollout.Object{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
	}
	res.Version = st.Version
	res.Images = append(res.Images, st.Images...)
	res.Kept = append(res.Kept, st.Kept...)
	res.CRDs, res.KeptCRDs = st.CRDs, st.KeptCRDs
	res.Repositories, res.PullSecrets = st.Repositories, st.PullSecrets
	res.Storage = rollout.Storage{Before: st.StorageBefore, After: st.StorageAfter}
	return res
}
