package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// result is what a step of reconcile tells it: go on to the next step, or
// stop here (with the step's error, or with none: nothing more to do).
type result int

const (
	proceed result = iota
	stop
)

// step is one step of reconcile, named by what it does.
type step func(a *attempt, ctx context.Context) (result, error)

// steps are reconcile's, in order (Flux's reconcilers are the model). Each
// reports in the status what it found; a failure stops the reconcile as
// settled (retried when the spec or request changes) or not (retried with
// backoff).
var steps = []step{
	(*attempt).findRegistry,
	(*attempt).resolveRoot,
	(*attempt).readKeys,
	(*attempt).readInputs,
	(*attempt).verify,
	(*attempt).readConfig,
	(*attempt).install,
}

// attempt is one reconcile of a Package: what its steps found so far.
type attempt struct {
	r   *Reconciler
	pkg *v1alpha1.Package
	// written is the status as last written, which progress updates.
	written *v1alpha1.PackageStatus

	registry string
	// repo is the registry's client, made when something must be read
	// from it: an unchanged resync reads nothing.
	repo *remote.Repository
	// root is the package's root digest.
	root string
	keys []artifact.Verifier
	// verifiedFor identifies the root and keys; requested tells that the
	// spec or the request changed since the last answer; verified that
	// the root was verified with these keys.
	verifiedFor         string
	requested, verified bool
	values              map[string]any
	charts              map[string]map[string]any
	timeout             time.Duration
	installedFor        string
	cfg                 *artifact.Config
	changed             bool // the root or the request changed
}

// reconcile runs the steps; written is the status as last written, which
// progress updates. An unchanged Package is checked again after resync.
func (r *Reconciler) reconcile(ctx context.Context, pkg *v1alpha1.Package, written *v1alpha1.PackageStatus) (ctrl.Result, error) {
	again := ctrl.Result{RequeueAfter: r.resync()}
	a := &attempt{r: r, pkg: pkg, written: written}
	for _, s := range steps {
		if res, err := s(a, ctx); err != nil || res == stop {
			return again, err
		}
	}
	return again, nil
}

// findRegistry finds where the controller reaches the registry.
func (a *attempt) findRegistry(ctx context.Context) (result, error) {
	registry, err := a.r.registry(ctx)
	if err != nil {
		return stop, a.r.fail(a.pkg, v1alpha1.Verified, v1alpha1.ReasonRegistryUnreachable, err)
	}
	a.registry = registry
	return proceed, nil
}

// openRepo makes the client of the package's repository, once.
func (a *attempt) openRepo(ctx context.Context) error {
	if a.repo != nil {
		return nil
	}
	_, cred, err := rollout.RegistryAccess(ctx, a.r.Clientset, a.r.Namespace)
	if err != nil {
		return a.r.fail(a.pkg, v1alpha1.Verified, v1alpha1.ReasonRegistryUnreachable, err)
	}
	if a.repo, err = (artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(a.registry, cred), Client: reach.RegistryClient()}).Repository(a.registry + "/" + a.pkg.Spec.Repository); err != nil {
		return a.r.settle(a.pkg, v1alpha1.Verified, v1alpha1.ReasonInvalid, err)
	}
	return nil
}

// resolveRoot finds the root: the spec's digest, or its tag resolved once.
func (a *attempt) resolveRoot(ctx context.Context) (result, error) {
	pkg := a.pkg
	a.root = pkg.Spec.Digest
	if a.root != "" {
		return proceed, nil
	}
	if pkg.Status.Tag == pkg.Spec.Tag && pkg.Status.Digest != "" {
		a.root = pkg.Status.Digest
		return proceed, nil
	}
	if err := a.openRepo(ctx); err != nil {
		return stop, err
	}
	desc, err := a.repo.Resolve(ctx, pkg.Spec.Tag)
	if err != nil {
		return stop, a.r.notFound(pkg, fmt.Errorf("resolve %s:%s: %w", pkg.Spec.Repository, pkg.Spec.Tag, err))
	}
	a.root = desc.Digest.String()
	return proceed, nil
}

// readKeys reads the keys the Package names. A root these keys refused
// already is not checked again until asked.
func (a *attempt) readKeys(ctx context.Context) (result, error) {
	pkg := a.pkg
	keys, fingerprint, err := a.r.keys(ctx, pkg)
	if err != nil {
		return stop, a.r.settle(pkg, v1alpha1.Verified, v1alpha1.ReasonKeyNotFound, err)
	}
	a.keys = keys
	a.verifiedFor = digest.FromString(a.root + "\n" + fingerprint).String()
	a.requested = pkg.Status.Request != pkg.Annotations[v1alpha1.RequestAnnotation] || pkg.Status.ObservedGeneration != pkg.Generation
	a.verified = pkg.Status.VerifiedFor == a.verifiedFor && meta.IsStatusConditionTrue(pkg.Status.Conditions, v1alpha1.Verified)
	if pkg.Status.VerifiedFor == a.verifiedFor && !a.requested &&
		conditionIs(pkg, v1alpha1.Verified, metav1.ConditionFalse, v1alpha1.ReasonVerifyFailed) {
		return stop, nil
	}
	return proceed, nil
}

// readInputs reads the values and the timeout the install is given. A
// Package verified and installed with the same inputs, not asked again,
// is left as it is (but for the drift check).
func (a *attempt) readInputs(ctx context.Context) (result, error) {
	pkg := a.pkg
	var err error
	if a.values, a.charts, err = a.r.values(ctx, pkg); err != nil {
		return stop, a.r.settle(pkg, v1alpha1.Installed, v1alpha1.ReasonInvalid, err)
	}
	a.timeout = rollout.DefaultTimeout
	if pkg.Spec.Timeout != nil && pkg.Spec.Timeout.Duration > 0 {
		a.timeout = pkg.Spec.Timeout.Duration
	}
	a.installedFor, err = installedFor(a.verifiedFor, a.registry, pkg.Spec.Components, a.values, a.charts, a.timeout)
	if err != nil {
		return stop, a.r.settle(pkg, v1alpha1.Installed, v1alpha1.ReasonInvalid, err)
	}
	if a.verified && !a.requested && a.r.unchanged(pkg, a.root, a.installedFor) {
		return stop, nil
	}
	return proceed, nil
}

// verify verifies the root, fail closed, unless it was verified with these
// keys already.
func (a *attempt) verify(ctx context.Context) (result, error) {
	if err := a.openRepo(ctx); err != nil {
		return stop, err
	}
	if a.verified {
		return proceed, nil
	}
	r, pkg, root := a.r, a.pkg, a.root
	if err := r.progress(ctx, pkg, a.written, "Verifying", "verifying "+pkg.Spec.Repository+"@"+root); err != nil {
		return stop, err
	}
	var signedBy []string
	var err error
	if pkg.Spec.InsecureSkipSignatureVerification {
		_, _, err = artifact.ReadConfig(ctx, a.repo, root)
	} else {
		var res *artifact.VerifyResult
		res, err = artifact.Verify(ctx, a.repo, root, artifact.VerifyOptions{Keys: a.keys})
		if err == nil {
			for _, s := range res.Signatures {
				signedBy = append(signedBy, s.Key)
			}
		}
	}
	if err != nil {
		reason := v1alpha1.ReasonVerifyFailed
		if errors.Is(err, artifact.ErrNotPackage) || errors.Is(err, errdef.ErrNotFound) {
			reason = v1alpha1.ReasonNotFound
		}
		if reach.Transient(err) {
			return stop, r.fail(pkg, v1alpha1.Verified, v1alpha1.ReasonRegistryUnreachable, err)
		}
		if reason == v1alpha1.ReasonVerifyFailed {
			pkg.Status.VerifiedFor = a.verifiedFor
		}
		return stop, r.settle(pkg, v1alpha1.Verified, reason, err)
	}
	pkg.Status.SignedBy = signedBy
	pkg.Status.VerifiedFor = a.verifiedFor
	msg := "signed by " + strings.Join(signedBy, ", ")
	reason := v1alpha1.ReasonVerified
	if pkg.Spec.InsecureSkipSignatureVerification {
		msg, reason = "signature verification skipped (insecureSkipSignatureVerification); manifests re-hashed", v1alpha1.ReasonSkipped
	}
	r.event(pkg, corev1.EventTypeNormal, reason, "Verify", "%s@%s %s", pkg.Spec.Repository, root, msg)
	setCondition(pkg, v1alpha1.Verified, metav1.ConditionTrue, reason, msg)
	return proceed, nil
}

// readConfig reads the package's config, which must name the Package. An
// install that failed (and was rolled back) is not tried again until asked.
func (a *attempt) readConfig(ctx context.Context) (result, error) {
	r, pkg, root := a.r, a.pkg, a.root
	cfg, _, err := artifact.ReadConfig(ctx, a.repo, root)
	if err != nil {
		if reach.Transient(err) {
			return stop, r.fail(pkg, v1alpha1.Installed, v1alpha1.ReasonRegistryUnreachable, err)
		}
		return stop, r.settle(pkg, v1alpha1.Installed, v1alpha1.ReasonNotFound, err)
	}
	if cfg.Name != pkg.Name {
		return stop, r.settle(pkg, v1alpha1.Installed, v1alpha1.ReasonNameMismatch,
			fmt.Errorf("the package at %s@%s is %s, not %s: a Package is named after the package it installs", pkg.Spec.Repository, root, cfg.Name, pkg.Name))
	}
	a.cfg = cfg
	a.changed = pkg.Status.Digest != root || a.requested
	if !a.changed && conditionIs(pkg, v1alpha1.Installed, metav1.ConditionFalse, v1alpha1.ReasonInstallFailed) {
		return stop, nil
	}
	return proceed, nil
}

// install rolls the package out (rollout.Apply, through the Installer) and
// reports what it installed.
func (a *attempt) install(ctx context.Context) (result, error) {
	r, pkg, root, cfg := a.r, a.pkg, a.root, a.cfg
	pkg.Status.Digest, pkg.Status.ShortDigest, pkg.Status.Version = root, short(root), cfg.Version
	pkg.Status.Tag = pkg.Spec.Tag
	if a.changed {
		if err := r.progress(ctx, pkg, a.written, v1alpha1.ReasonProgressing, fmt.Sprintf("installing %s %s", cfg.Name, cfg.Version)); err != nil {
			return stop, err
		}
	}
	rec, err := r.installer().Apply(ctx, cfg, digest.Digest(root), rollout.ApplyOptions{
		Namespace: r.Namespace, Kube: r.Kube, Components: pkg.Spec.Components, Values: a.values, ChartValues: a.charts,
		Timeout: a.timeout, Registry: a.registry, Render: r.Render,
	})
	if err != nil {
		if reach.Transient(err) {
			return stop, r.fail(pkg, v1alpha1.Installed, v1alpha1.ReasonRegistryUnreachable, err)
		}
		err = r.settle(pkg, v1alpha1.Installed, v1alpha1.ReasonInstallFailed, err)
		setCondition(pkg, v1alpha1.Ready, metav1.ConditionFalse, v1alpha1.ReasonInstallFailed, oneLine(err.Error()))
		return stop, err
	}
	r.installed(pkg, rec, a.changed)
	pkg.Status.InstalledFor = a.installedFor
	pkg.Status.InstalledAt = &metav1.Time{Time: r.now()}
	return proceed, nil
}
