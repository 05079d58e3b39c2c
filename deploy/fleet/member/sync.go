package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// Reasons a member gives the centre for a desired package it does not run
// (v1alpha1.MemberPackage.Reason). All but ReasonDeployFailed are
// refusals: the member does not try the same digest again until the
// centre asks for another one or the cluster's trusted keys change.
const (
	// ReasonVerificationFailed: the bundle is signed by none of the keys
	// the member trusts, or does not verify.
	ReasonVerificationFailed = pkgapi.ReasonVerifyFailed
	// ReasonNoTrustedKey: the member trusts no key (`ferry init --key`
	// stores them).
	ReasonNoTrustedKey = "NoTrustedKey"
	// ReasonInvalidBundle: what the centre sent is not a package.
	ReasonInvalidBundle = "InvalidBundle"
	// ReasonBundleMismatch: the bundle is another package, or another
	// version, than the one asked for.
	ReasonBundleMismatch = "BundleMismatch"
	// ReasonInvalidDesired: the desired package itself does not check (its
	// repository, digest, values, components or timeout).
	ReasonInvalidDesired = "InvalidDesiredState"
	// ReasonDeployFailed: fetching or deploying it failed; it is tried
	// again, less and less often.
	ReasonDeployFailed = "DeployFailed"
	// ReasonNotPlaced: a Package of its name is there that no placement
	// put there (deployed by hand): the agent leaves it alone, and looks
	// again at each heartbeat.
	ReasonNotPlaced = "NotPlaced"
)

// refusal is a package the member will not deploy.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(reason string, format string, a ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf(format, a...)}
}

// SyncOnce is one heartbeat: the report in, the desired state out, and
// the desired state applied. It records its outcome in the Secret (its
// error, or lastSync).
func (a *Agent) SyncOnce(ctx context.Context) (*wire.Desired, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, err := readState(ctx, a.Client, a.ns())
	if err != nil {
		return nil, err
	}
	return a.syncLocked(ctx, s)
}

func (a *Agent) syncLocked(ctx context.Context, s *state) (*wire.Desired, error) {
	if s.Credential == "" {
		return nil, fmt.Errorf("the member has not joined: Secret %s/%s holds no credential", a.ns(), SecretName)
	}
	if s.Credential != a.st.identity {
		// A new identity: the centre knows nothing of us yet.
		a.st = agentState{identity: s.Credential, interval: a.st.interval}
	}
	d, err := a.sync(ctx, s)
	a.recordSync(ctx, s.Credential, err)
	return d, err
}

func (a *Agent) sync(ctx context.Context, s *state) (*wire.Desired, error) {
	if err := wire.CheckURL(s.URL); err != nil {
		return nil, fmt.Errorf("Secret %s: %w", SecretName, err)
	}
	pin, err := wire.CAPin([]byte(s.CA))
	if err != nil {
		return nil, fmt.Errorf("Secret %s: %w", SecretName, err)
	}
	c := a.client(s.URL, pin, s.Credential, nil)
	rep, sum, err := a.report(ctx, s)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
	d, err := c.Sync(sctx, rep)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("sync with the centre at %s: no whole answer within %s", s.URL, a.requestTimeout())
	}
	if err != nil {
		return nil, centreError("sync with the centre", s.URL, err)
	}
	if rep.Receipt != nil {
		a.st.receiptSent = sum
	}
	a.setInterval(d.IntervalSeconds)
	if err := a.apply(ctx, c, d); err != nil {
		return d, err
	}
	return d, nil
}

// apply makes the cluster run d: each desired package deployed unless it
// runs at that digest with those values and components already, or its
// digest was refused; each Package a placement put here and no placement
// wants any more deleted (without waiting for the controller).
func (a *Agent) apply(ctx context.Context, c *wire.Client, d *wire.Desired) error {
	before := a.st.invalid
	a.st.desired, a.st.invalid = map[string]wire.DesiredPackage{}, map[string]outcome{}
	if a.st.refused == nil {
		a.st.refused, a.st.failed = map[string]outcome{}, map[string]outcome{}
	}
	times := map[string]int{}
	for _, p := range d.Packages {
		times[p.Name]++
	}
	var valid []wire.DesiredPackage
	for _, p := range d.Packages {
		err := checkDesired(p)
		if n := times[p.Name]; err == nil && n > 1 {
			err = fmt.Errorf("the centre lists package %s %d times", p.Name, n)
		}
		if !validName(p.Name) {
			a.log().Warn("fleet: desired package refused", "error", oneLine(err.Error()))
			continue
		}
		if _, dup := a.st.desired[p.Name]; dup {
			continue
		}
		a.st.desired[p.Name] = p
		if err != nil {
			o := outcome{digest: p.Digest, reason: ReasonInvalidDesired, message: oneLine(err.Error())}
			a.st.invalid[p.Name] = o
			if before[p.Name] != o {
				a.log().Warn("fleet: desired package refused", "package", p.Name, "reason", ReasonInvalidDesired, "error", o.message)
			}
			continue
		}
		valid = append(valid, p)
	}
	for name := range a.st.refused {
		if p, ok := a.st.desired[name]; !ok || p.Digest != a.st.refused[name].digest {
			delete(a.st.refused, name)
		}
	}
	for name := range a.st.failed {
		if p, ok := a.st.desired[name]; !ok || p.Digest != a.st.failed[name].digest {
			delete(a.st.failed, name)
		}
	}
	for _, p := range valid {
		if err := ctx.Err(); err != nil {
			return err
		}
		a.ensure(ctx, c, p, before[p.Name])
	}
	return a.prune(ctx)
}

// ensure deploys p unless it runs already, or was refused. A Package of
// p's name that no placement put there is left alone (ReasonNotPlaced;
// was is p's outcome of the last heartbeat): the centre may not take
// over, and later delete, what the site deployed itself.
func (a *Agent) ensure(ctx context.Context, c *wire.Client, p wire.DesiredPackage, was outcome) {
	var cur pkgapi.Package
	err := a.Packages.Get(ctx, client.ObjectKey{Namespace: a.ns(), Name: p.Name}, &cur)
	switch {
	case err == nil && cur.Labels[LabelPlacement] == "":
		o := outcome{digest: p.Digest, reason: ReasonNotPlaced, message: fmt.Sprintf("Package %s of namespace %s was not put there by the fleet: "+
			"the agent leaves it alone (delete it, or label it %s=%s, to hand it over)", p.Name, a.ns(), LabelPlacement, p.Placement)}
		a.st.invalid[p.Name] = o
		delete(a.st.failed, p.Name)
		if was != o {
			a.log().Warn("fleet: desired package refused", "package", p.Name, "reason", ReasonNotPlaced, "error", o.message)
		}
		return
	case err == nil && upToDate(&cur, p):
		delete(a.st.failed, p.Name)
		return
	case err != nil && !apierrors.IsNotFound(err):
		a.fail(p, fmt.Errorf("read Package %s/%s: %w", a.ns(), p.Name, err))
		return
	}
	if r, ok := a.st.refused[p.Name]; ok && r.digest == p.Digest && r.components == components(p) {
		if r.keys == a.keysFingerprint(ctx) {
			return
		}
		delete(a.st.refused, p.Name) // the trusted keys changed: try again
	}
	if f, ok := a.st.failed[p.Name]; ok && a.now().Before(f.retryAt) {
		return
	}
	err = a.deploy(ctx, c, p)
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		a.st.refused[p.Name] = outcome{digest: p.Digest, components: components(p), reason: ref.reason, message: oneLine(err.Error()), keys: a.keysFingerprint(ctx)}
		delete(a.st.failed, p.Name)
		a.log().Warn("fleet: package refused", "package", p.Name, "digest", p.Digest, "reason", ref.reason, "error", oneLine(err.Error()))
	case err != nil:
		a.fail(p, err)
	default:
		delete(a.st.failed, p.Name)
	}
}

// fail remembers a failed deploy of p, to try again after a wait that
// doubles each time, from one heartbeat to MaxRetryBackoff.
func (a *Agent) fail(p wire.DesiredPackage, err error) {
	f := a.st.failed[p.Name]
	f.wait = min(max(2*f.wait, a.interval()), MaxRetryBackoff)
	f.digest, f.reason, f.message, f.retryAt = p.Digest, ReasonDeployFailed, oneLine(err.Error()), a.now().Add(f.wait)
	a.st.failed[p.Name] = f
	a.log().Warn("fleet: deploy failed", "package", p.Name, "digest", p.Digest, "error", f.message, "retry", f.wait.String())
}

// upToDate tells whether the Package pkg asks for what p asks for, marked
// as p's placement's: then there is nothing to do — the controller is at
// it, or has answered (Ready, or a failure it reports, which a new deploy
// of the same would only repeat).
func upToDate(pkg *pkgapi.Package, p wire.DesiredPackage) bool {
	if !pkg.DeletionTimestamp.IsZero() || pkg.Labels[LabelPlacement] != p.Placement || pkg.Spec.Digest != p.Digest || len(pkg.Spec.Keys) == 0 {
		return false
	}
	var have []byte
	if pkg.Spec.Values != nil {
		have = pkg.Spec.Values.Raw
	}
	if !sameValues(have, p.Values) {
		return false
	}
	if !slices.Equal(sorted(pkg.Spec.Components), sorted(p.Components)) {
		return false
	}
	timeout := deploy.DefaultTimeout
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	return pkg.Spec.Timeout != nil && pkg.Spec.Timeout.Duration == timeout
}

// components is what a refusal remembers of p's components: a refusal of
// one it does not have is tried again when they change.
func components(p wire.DesiredPackage) string { return strings.Join(sorted(p.Components), ",") }

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// prune deletes the Packages a placement put here that no placement wants
// any more. It does not wait: the controller removes what they installed.
func (a *Agent) prune(ctx context.Context) error {
	var list pkgapi.PackageList
	if err := a.Packages.List(ctx, &list, client.InNamespace(a.ns()), client.HasLabels{LabelPlacement}); err != nil {
		if meta.IsNoMatchError(err) {
			return nil // no Package API: nothing was placed
		}
		return fmt.Errorf("list the placed Packages of %s: %w", a.ns(), err)
	}
	var errs []error
	for i := range list.Items {
		pkg := &list.Items[i]
		if _, want := a.st.desired[pkg.Name]; want || !pkg.DeletionTimestamp.IsZero() {
			continue
		}
		err := a.Packages.Delete(ctx, pkg, client.Preconditions{UID: &pkg.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Package %s/%s: %w", a.ns(), pkg.Name, err))
			continue
		}
		a.st.stale = true
		a.log().Info("fleet: package no longer placed: deleted", "package", pkg.Name, "placement", pkg.Labels[LabelPlacement])
	}
	return errors.Join(errs...)
}

// keysFingerprint names the cluster's trusted key Secrets: a refusal is
// kept only while they stay the same.
func (a *Agent) keysFingerprint(ctx context.Context) string {
	list, err := a.Client.CoreV1().Secrets(a.ns()).List(ctx, metav1.ListOptions{LabelSelector: deploy.KeyLabel + "=true"})
	if err != nil {
		return ""
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name+"@"+s.ResourceVersion)
	}
	slices.Sort(names)
	sum := sha256.Sum256([]byte(strings.Join(names, "\n")))
	return hex.EncodeToString(sum[:])
}

// overlay adds to the Packages of a report what the agent knows of the
// desired ones: their target, and why one does not run.
func (a *Agent) overlay(pkgs []v1alpha1.MemberPackage) []v1alpha1.MemberPackage {
	byName := map[string]int{}
	for i, p := range pkgs {
		byName[p.Name] = i
	}
	for name, d := range a.st.desired {
		i, ok := byName[name]
		if !ok {
			pkgs = append(pkgs, v1alpha1.MemberPackage{Name: name})
			i = len(pkgs) - 1
			byName[name] = i
		}
		mp := &pkgs[i]
		mp.Placement, mp.Target = d.Placement, d.Digest
		for _, set := range []map[string]outcome{a.st.invalid, a.st.refused, a.st.failed} {
			if o, ok := set[name]; ok && o.digest == d.Digest {
				mp.Refused = o.reason != ReasonDeployFailed
				mp.Reason, mp.Message = o.reason, o.message
				break
			}
		}
	}
	slices.SortFunc(pkgs, func(x, y v1alpha1.MemberPackage) int { return strings.Compare(x.Name, y.Name) })
	return pkgs
}

// memberPackage is a Package as a report tells it.
func memberPackage(p *pkgapi.Package) v1alpha1.MemberPackage {
	mp := v1alpha1.MemberPackage{Name: p.Name, Placement: p.Labels[LabelPlacement], Version: p.Status.Version, Digest: p.Status.Digest}
	ready := meta.FindStatusCondition(p.Status.Conditions, pkgapi.Ready)
	mp.Ready = ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration >= p.Generation &&
		p.Status.Digest != "" && p.Status.Digest == p.Spec.Digest
	if ready != nil && ready.Status == metav1.ConditionFalse {
		mp.Reason, mp.Message = ready.Reason, oneLine(ready.Message)
	}
	// The controller's own refusal, with the keys the Package names.
	if v := meta.FindStatusCondition(p.Status.Conditions, pkgapi.Verified); v != nil && v.Status == metav1.ConditionFalse {
		mp.Refused, mp.Target, mp.Reason, mp.Message = true, p.Spec.Digest, v.Reason, oneLine(v.Message)
	}
	return mp
}
