package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Package objects (ferry.dev/v1alpha1) are how a deploy is asked of the
// cluster: ferry deploy pushes a package (Push), then applies its Package
// and waits for the controller (package deploy/controller) to report it
// Ready; a GitOps tool can apply the same object without ferry.

// ErrNoPackageAPI means the cluster has no Package CRD: ferry init (of
// this version) was not run.
var ErrNoPackageAPI = errors.New("the cluster has no Package API (packages.ferry.dev)")

// ErrBeingDeleted means the Package is being removed, and cannot be
// deployed again until that has finished.
var ErrBeingDeleted = errors.New("is being deleted")

// ErrNoKeyToMigrate means a package deployed by an earlier ferry, before
// the Package API, cannot become a Package: no public key was given to
// verify it with.
var ErrNoKeyToMigrate = errors.New("deployed by an earlier ferry, and no public key was given to migrate it to a Package")

// KeyLabel marks the Secrets that hold the public keys Packages name;
// KeyFile is the key of such a Secret that holds the PEM key.
const (
	KeyLabel = "ferry.dev/public-key"
	KeyFile  = "cosign.pub"
)

// PackageClient returns a client for Packages (and the core API).
func PackageClient(cfg *rest.Config) (client.WithWatch, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// EnsureKeySecret stores a PEM public key in a Secret of namespace ns
// named after its digest (so it never changes), and returns the reference
// a Package names it by.
func EnsureKeySecret(ctx context.Context, cs kubernetes.Interface, ns string, pem []byte) (v1alpha1.KeyReference, error) {
	sum := sha256.Sum256(pem)
	name := "ferry-key-" + hex.EncodeToString(sum[:])[:16]
	ref := v1alpha1.KeyReference{Kind: "Secret", Name: name, Key: KeyFile}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy, KeyLabel: "true"}},
		Immutable:  ptr(true),
		Data:       map[string][]byte{ref.Key: pem},
	}
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return ref, fmt.Errorf("store the public key in Secret %s/%s: %w", ns, name, err)
	}
	return ref, nil
}

// ApplyPackage creates the Package name in namespace ns, or sets the spec
// of the one there, with a new RequestAnnotation so that the controller
// answers even when the spec did not change. labels are set on it (the
// others it has are kept). It returns the object written and its request.
func ApplyPackage(ctx context.Context, c client.Client, ns, name string, spec v1alpha1.PackageSpec, labels map[string]string) (*v1alpha1.Package, string, error) {
	request := strconv.FormatInt(time.Now().UnixNano(), 36)
	var pkg v1alpha1.Package
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pkg)
	switch {
	case apierrors.IsNotFound(err):
		pkg = v1alpha1.Package{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: map[string]string{v1alpha1.RequestAnnotation: request}},
			Spec:       spec,
		}
		err = c.Create(ctx, &pkg)
	case err == nil:
		if !pkg.DeletionTimestamp.IsZero() {
			return nil, "", fmt.Errorf("Package %s/%s %w", ns, name, ErrBeingDeleted)
		}
		pkg.Spec = spec
		if pkg.Annotations == nil {
			pkg.Annotations = map[string]string{}
		}
		pkg.Annotations[v1alpha1.RequestAnnotation] = request
		for k, v := range labels {
			if pkg.Labels == nil {
				pkg.Labels = map[string]string{}
			}
			pkg.Labels[k] = v
		}
		err = c.Update(ctx, &pkg)
	}
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, "", ErrNoPackageAPI
		}
		return nil, "", fmt.Errorf("apply Package %s/%s: %w", ns, name, err)
	}
	return &pkg, request, nil
}

// WaitPackage waits until the controller has answered the Package's
// request at its generation: nil when it is Ready, else an error with the
// condition that says why not (verification refused, install failed and
// rolled back). seen, if set, is called with each condition as it changes.
func WaitPackage(ctx context.Context, c client.WithWatch, pkg *v1alpha1.Package, request string, seen func(metav1.Condition)) (*v1alpha1.Package, error) {
	last := map[string]string{}
	check := func(p *v1alpha1.Package) (bool, error) {
		for _, typ := range []string{v1alpha1.Verified, v1alpha1.Installed, v1alpha1.Ready} {
			cond := meta.FindStatusCondition(p.Status.Conditions, typ)
			if cond == nil {
				continue
			}
			key := string(cond.Status) + cond.Reason + cond.Message
			if last[cond.Type] != key && cond.ObservedGeneration >= pkg.Generation {
				last[cond.Type] = key
				if seen != nil {
					seen(*cond)
				}
			}
		}
		if p.Status.ObservedGeneration < pkg.Generation || p.Status.Request != request {
			return false, nil
		}
		if ready := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.Ready); ready != nil && ready.Status == metav1.ConditionTrue {
			return true, nil
		}
		for _, typ := range []string{v1alpha1.Verified, v1alpha1.Installed} {
			if cond := meta.FindStatusCondition(p.Status.Conditions, typ); cond != nil && cond.Status == metav1.ConditionFalse {
				return true, fmt.Errorf("Package %s/%s: %s: %s", p.Namespace, p.Name, cond.Reason, cond.Message)
			}
		}
		return false, nil
	}
	var out *v1alpha1.Package
	err := watchPackage(ctx, c, pkg.Namespace, pkg.Name, func(p *v1alpha1.Package, deleted bool) (bool, error) {
		if deleted {
			return true, fmt.Errorf("Package %s/%s was deleted", pkg.Namespace, pkg.Name)
		}
		out = p
		return check(p)
	})
	return out, err
}

// DeletePackage deletes a Package and waits until the controller has
// removed what it installed and let it go; it returns what the removal
// reported. ok is false when there was no such Package.
func DeletePackage(ctx context.Context, c client.WithWatch, ns, name string) (removal *v1alpha1.RemovalStatus, ok bool, err error) {
	pkg := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Delete(ctx, pkg); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("delete Package %s/%s: %w", ns, name, err)
	}
	var lastErr string
	err = watchPackage(ctx, c, ns, name, func(p *v1alpha1.Package, deleted bool) (bool, error) {
		if p != nil {
			if p.Status.Removal != nil {
				removal = p.Status.Removal
			}
			lastErr = p.Status.LastError
		}
		return deleted, nil
	})
	if err != nil && lastErr != "" {
		err = fmt.Errorf("%w (the controller: %s)", err, lastErr)
	}
	return removal, true, err
}

// watchPackage calls fn with the Package as it is, then as it changes,
// until fn is done; deleted says it is gone (p is its last state, or nil).
func watchPackage(ctx context.Context, c client.WithWatch, ns, name string, fn func(p *v1alpha1.Package, deleted bool) (bool, error)) error {
	for {
		var list v1alpha1.PackageList
		sel := client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}
		if err := c.List(ctx, &list, client.InNamespace(ns), sel); err != nil {
			return fmt.Errorf("read Package %s/%s: %w", ns, name, err)
		}
		if len(list.Items) == 0 {
			_, err := fn(nil, true)
			return err
		}
		if done, err := fn(&list.Items[0], false); done || err != nil {
			return err
		}
		w, err := c.Watch(ctx, &v1alpha1.PackageList{}, client.InNamespace(ns), sel, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			return fmt.Errorf("watch Package %s/%s: %w", ns, name, err)
		}
		done, err := drain(ctx, w, fn)
		w.Stop()
		if done || err != nil {
			return err
		}
		// The watch ended (a timeout of the API server): list again.
	}
}

func drain(ctx context.Context, w watch.Interface, fn func(p *v1alpha1.Package, deleted bool) (bool, error)) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open {
				return false, nil
			}
			p, ok := ev.Object.(*v1alpha1.Package)
			if !ok {
				continue // a watch error: list again
			}
			if done, err := fn(p, ev.Type == watch.Deleted); done || err != nil {
				return true, err
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// MigratedAnnotation marks a Package that Migrate made from a record.
const MigratedAnnotation = "ferry.dev/migrated-from"

// Migrate gives every package recorded by an earlier ferry (a Secret
// record and no Package) its Package, so that the controller keeps it from
// now on without changing what runs: the same root, components, and per
// chart the values its Helm release was given; keys are the public keys
// the packages are signed with. It returns the packages migrated.
func Migrate(ctx context.Context, cs kubernetes.Interface, c client.Client, kube genericclioptions.RESTClientGetter, ns string, keys []v1alpha1.KeyReference) ([]string, error) {
	recs, err := (&rollout.State{Client: cs, Namespace: ns}).List(ctx)
	if err != nil {
		return nil, err
	}
	var migrated []string
	for _, rec := range recs {
		var cur v1alpha1.Package
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: rec.Name}, &cur)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return migrated, fmt.Errorf("Package %s/%s: %w", ns, rec.Name, err)
		}
		if len(keys) == 0 {
			return migrated, fmt.Errorf("package %s: %w", rec.Name, ErrNoKeyToMigrate)
		}
		spec := v1alpha1.PackageSpec{Repository: rec.Name, Digest: rec.Root.String(), Components: rec.Components, Keys: keys}
		if len(rec.Components) == len(rec.Config.Components) {
			spec.Components = nil // all of them
		}
		for _, comp := range rec.Config.Components {
			for _, ch := range comp.Charts {
				rns, rname := ch.Release()
				i := slices.IndexFunc(rec.Releases, func(r rollout.Release) bool { return r.Namespace == rns && r.Name == rname })
				if i < 0 {
					continue
				}
				values, err := rollout.ReleaseValues(kube, rec.Releases[i])
				if err != nil {
					return migrated, err
				}
				if len(values) == 0 {
					continue
				}
				raw, err := json.Marshal(values)
				if err != nil {
					return migrated, err
				}
				spec.Charts = append(spec.Charts, v1alpha1.ChartValues{Name: ch.Name, Values: &apiextensionsv1.JSON{Raw: raw}})
			}
		}
		pkg := &v1alpha1.Package{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rec.Name, Annotations: map[string]string{MigratedAnnotation: rollout.RecordSecret(rec.Name)}},
			Spec:       spec,
		}
		if err := c.Create(ctx, pkg); err != nil {
			return migrated, fmt.Errorf("create Package %s/%s: %w", ns, rec.Name, err)
		}
		migrated = append(migrated, rec.Name)
	}
	return migrated, nil
}

// ErrNoTrustedKey means ferry's namespace holds no public key Secret.
var ErrNoTrustedKey = errors.New("the cluster trusts no key")

// TrustedKeys are the public keys the cluster trusts: those of the Secrets
// of namespace ns labelled KeyLabel, each named by its Secret. A Secret
// whose key this version cannot read is skipped; none at all is
// ErrNoTrustedKey, with the fix.
func TrustedKeys(ctx context.Context, cs kubernetes.Interface, ns string) ([]artifact.Verifier, error) {
	list, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: KeyLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("read the trusted keys: %w", err)
	}
	var keys []artifact.Verifier
	for _, sec := range list.Items {
		k, err := artifact.ParsePublicKey(sec.Name, sec.Data[KeyFile])
		if err != nil {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w (no Secret labelled %s=true in namespace %s)", ErrNoTrustedKey, KeyLabel, ns)
	}
	return keys, nil
}
