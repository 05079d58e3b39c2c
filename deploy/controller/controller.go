// Package controller keeps Package objects (ferry.dev/v1alpha1) true: each
// names a signed package in the in-cluster registry, by digest, and the
// Reconciler verifies it against the keys the Package names (fail closed),
// rolls it out with rollout.Apply — the code ferry deploy always used —,
// reports conditions, events and what it installed, puts back what was
// deleted by hand on its next resync, and removes everything
// (rollout.Uninstall) when the Package is deleted.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Name is the controller's name: its events' reporter, its field manager.
const Name = "ferry-controller"

// DefaultResync is how often an unchanged Package is checked again (drift).
const DefaultResync = 5 * time.Minute

// DefaultDriftCheck is how often an unchanged Package is installed again,
// what it installed checked for drift.
const DefaultDriftCheck = time.Hour

// Reconciler reconciles the Packages of ferry's namespace.
type Reconciler struct {
	// Client reads Packages, Secrets and ConfigMaps (cached) and writes
	// Packages.
	Client client.Client
	// Clientset reads the registry's address and account (and is what
	// rollout.Apply and rollout.Uninstall use); Kube is what they use for Helm
	// and server-side apply.
	Clientset kubernetes.Interface
	Kube      genericclioptions.RESTClientGetter
	// Installer installs and removes packages; rollout.Apply and
	// rollout.Uninstall through Clientset if nil.
	Installer Installer
	// Namespace is ferry's namespace: the registry, the records, and the
	// only namespace whose Packages are reconciled.
	Namespace string
	// Registry is where the controller reaches the in-cluster registry
	// (host:port); the registry Service's cluster IP and port if empty.
	Registry string
	// Recorder records events on the Packages; none if nil.
	Recorder events.EventRecorder
	// Resync is how often an unchanged Package is checked again;
	// DefaultResync if 0.
	Resync time.Duration
	// DriftCheck is how often an unchanged Package is installed again, so
	// that what was changed or deleted behind its back comes back (its
	// charts' resources checked, its manifests applied); between two, a
	// resync of an unchanged Package reads nothing from the registry and
	// changes nothing. DefaultDriftCheck if 0.
	DriftCheck time.Duration
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// GCQuiet is how long the registry's garbage collection waits after the
	// last removal, so that one serves a batch; DefaultGCQuiet if 0.
	GCQuiet time.Duration
	// Render renders each chart's release before Helm installs or
	// upgrades it in the controller (rollout.ApplyOptions.Render): a
	// chart past its limits fails its Package's install, the reason on
	// its status, and the controller goes on. Nil: charts are rendered by
	// Helm in the controller only.
	Render rollout.ReleaseRenderer

	gc collector
}

// SetupWithManager registers the Reconciler with a manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("package").
		For(&v1alpha1.Package{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			deletionPredicate))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// deletionPredicate lets through the update that sets a deletion
// timestamp (no generation change for a finalized object).
var deletionPredicate = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectNew.GetDeletionTimestamp() != nil && e.ObjectOld.GetDeletionTimestamp() == nil
}}

// Reconcile brings one Package to what its spec says.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Namespace != r.Namespace {
		return ctrl.Result{}, nil
	}
	var pkg v1alpha1.Package
	if err := r.Client.Get(ctx, req.NamespacedName, &pkg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pkg.DeletionTimestamp.IsZero() {
		return r.remove(ctx, &pkg)
	}
	if !controllerutil.ContainsFinalizer(&pkg, v1alpha1.Finalizer) {
		patch := client.MergeFrom(pkg.DeepCopy())
		controllerutil.AddFinalizer(&pkg, v1alpha1.Finalizer)
		if err := r.Client.Patch(ctx, &pkg, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := pkg.Status.DeepCopy()
	res, err := r.reconcile(ctx, &pkg, before)
	pkg.Status.ObservedGeneration = pkg.Generation
	pkg.Status.Request = pkg.Annotations[v1alpha1.RequestAnnotation]
	if err != nil {
		pkg.Status.LastError = oneLine(err.Error())
	} else {
		pkg.Status.LastError = ""
	}
	if serr := r.writeStatus(ctx, &pkg, before); serr != nil {
		return ctrl.Result{}, errors.Join(err, serr)
	}
	if errors.Is(err, errSettled) {
		return res, nil
	}
	return res, err
}

// errSettled wraps failures that retrying will not mend (a bad signature,
// a failed install rolled back): they are reported in the status, and the
// Package waits for its spec or RequestAnnotation to change.
var errSettled = errors.New("settled")

func (r *Reconciler) resync() time.Duration {
	if r.Resync > 0 {
		return r.Resync
	}
	return DefaultResync
}

// installed reports a successful install in the status (and an event,
// when something was asked of it).
func (r *Reconciler) installed(pkg *v1alpha1.Package, rec *rollout.Record, changed bool) {
	st := &pkg.Status
	st.Releases, st.Objects = releaseStatus(rec.Releases), objectStatus(rec.Objects)
	st.Images, _ = rollout.ImageRefs(rec.Config)
	st.ImagePolicies = ImagePolicyStatus(rec.Config)
	msg := fmt.Sprintf("%s %s: %d releases, %d objects, %d images", rec.Name, rec.Version, len(rec.Releases), len(rec.Objects), len(st.Images))
	setCondition(pkg, v1alpha1.Installed, metav1.ConditionTrue, v1alpha1.ReasonInstalled, msg)
	setCondition(pkg, v1alpha1.Ready, metav1.ConditionTrue, v1alpha1.ReasonInstalled, msg+", all ready")
	if changed {
		r.event(pkg, corev1.EventTypeNormal, v1alpha1.ReasonInstalled, "Install", "%s", msg)
	}
}

func releaseStatus(rels []rollout.Release) []v1alpha1.ReleaseStatus {
	var out []v1alpha1.ReleaseStatus
	for _, r := range rels {
		out = append(out, v1alpha1.ReleaseStatus{Namespace: r.Namespace, Name: r.Name, Chart: r.Chart, Revision: r.Revision})
	}
	return out
}

func objectStatus(objs []rollout.Object) []v1alpha1.ObjectStatus {
	var out []v1alpha1.ObjectStatus
	for _, o := range objs {
		out = append(out, v1alpha1.ObjectStatus{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
	}
	return out
}

// remove uninstalls what the Package installed (rollout.Uninstall: releases,
// objects, its images unless another package uses them), waits for the
// registry's garbage collection that one batch of removals shares (see
// collector), and lets the Package go.
func (r *Reconciler) remove(ctx context.Context, pkg *v1alpha1.Package) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pkg, v1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, client.ObjectKey{Name: pkg.Namespace}, &ns); err == nil && !ns.DeletionTimestamp.IsZero() {
		// ferry's namespace is going, its registry with it: nothing can be
		// removed through it, and the namespace must not wait for us.
		r.event(pkg, corev1.EventTypeWarning, "NamespaceDeleted", "Remove", "namespace %s is being deleted: what the package installed is left in place", pkg.Namespace)
		return ctrl.Result{}, r.release(ctx, pkg)
	}
	registry, err := r.registry(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	opts := rollout.UninstallOptions{Namespace: r.Namespace, Kube: r.Kube, Registry: registry, DeferGC: true}
	if !r.gc.waiting(pkg.UID) {
		if err := r.uninstall(ctx, pkg, opts); err != nil {
			return ctrl.Result{}, err
		}
	}
	storage, ok, err := r.gc.settle(ctx, pkg.UID, r.now(), r.gcQuiet(), func(ctx context.Context) (rollout.Storage, error) {
		return r.installer().CollectGarbage(ctx, opts)
	})
	if !ok {
		return ctrl.Result{RequeueAfter: r.gcQuiet()}, nil
	}
	before := pkg.Status.DeepCopy()
	if err != nil {
		pkg.Status.LastError = oneLine("registry garbage collection: " + err.Error())
		r.event(pkg, corev1.EventTypeWarning, "RemoveFailed", "Remove", "%s", pkg.Status.LastError)
		return ctrl.Result{}, errors.Join(err, r.writeStatus(ctx, pkg, before))
	}
	if pkg.Status.Removal == nil {
		pkg.Status.Removal = &v1alpha1.RemovalStatus{}
	}
	pkg.Status.Removal.StorageBefore, pkg.Status.Removal.StorageAfter = storage.Before, storage.After
	pkg.Status.LastError = ""
	r.event(pkg, corev1.EventTypeNormal, "GarbageCollected", "Remove", "registry storage %d → %d bytes", storage.Before, storage.After)
	if err := r.writeStatus(ctx, pkg, before); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.release(ctx, pkg)
}

// uninstall runs rollout.Uninstall for pkg (its garbage collection deferred),
// reports what it removed in the status, and asks for a collection.
func (r *Reconciler) uninstall(ctx context.Context, pkg *v1alpha1.Package, opts rollout.UninstallOptions) error {
	before := pkg.Status.DeepCopy()
	setCondition(pkg, v1alpha1.Ready, metav1.ConditionFalse, v1alpha1.ReasonDeleting, "removing what the package installed")
	if err := r.writeStatus(ctx, pkg, before); err != nil {
		return err
	}
	r.gc.begin()
	res, err := r.installer().Uninstall(ctx, pkg.Name, opts)
	r.gc.end(r.now())
	before = pkg.Status.DeepCopy()
	switch {
	case errors.Is(err, rollout.ErrNotDeployed):
		// Removed already (before a restart, or a failed collection): what
		// the status says stays.
		if pkg.Status.Removal == nil {
			pkg.Status.Removal = &v1alpha1.RemovalStatus{}
		}
	case err != nil:
		pkg.Status.LastError = oneLine(err.Error())
		r.event(pkg, corev1.EventTypeWarning, "RemoveFailed", "Remove", "%s", pkg.Status.LastError)
		return errors.Join(err, r.writeStatus(ctx, pkg, before))
	default:
		pkg.Status.Removal = &v1alpha1.RemovalStatus{
			Version:  res.Version,
			Releases: releaseStatus(res.Releases), Objects: objectStatus(res.Objects), Images: res.Images, Kept: res.Kept,
			CRDs: res.CRDs, KeptCRDs: res.KeptCRDs, Repositories: res.Repositories, PullSecrets: res.PullSecrets,
		}
		r.event(pkg, corev1.EventTypeNormal, "Removed", "Remove", "%d releases, %d objects, %d images (%d kept for other packages); registry garbage collection follows",
			len(res.Releases), len(res.Objects), len(res.Images), len(res.Kept))
	}
	pkg.Status.LastError = ""
	if err := r.writeStatus(ctx, pkg, before); err != nil {
		return err
	}
	r.gc.ask(pkg.UID, r.now())
	return nil
}

// release removes the Package's finalizer: it goes.
func (r *Reconciler) release(ctx context.Context, pkg *v1alpha1.Package) error {
	patch := client.MergeFrom(pkg.DeepCopy())
	controllerutil.RemoveFinalizer(pkg, v1alpha1.Finalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, pkg, patch))
}

func (r *Reconciler) gcQuiet() time.Duration {
	if r.GCQuiet > 0 {
		return r.GCQuiet
	}
	return DefaultGCQuiet
}

// registry is where the controller reaches the in-cluster registry.
func (r *Reconciler) registry(ctx context.Context) (string, error) {
	if r.Registry != "" {
		return r.Registry, nil
	}
	var svc corev1.Service
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: cluster.RegistryName}, &svc); err != nil {
		return "", fmt.Errorf("the registry's Service %s/%s: %w", r.Namespace, cluster.RegistryName, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
		return "", fmt.Errorf("the registry's Service %s/%s has no cluster IP", r.Namespace, cluster.RegistryName)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), nil
}

// settle reports a failure that retrying will not mend: condition typ
// False, and Ready False saying what still runs.
func (r *Reconciler) settle(pkg *v1alpha1.Package, typ, reason string, err error) error {
	msg := oneLine(err.Error())
	setCondition(pkg, typ, metav1.ConditionFalse, reason, msg)
	ready := msg
	if pkg.Status.Version != "" && meta.IsStatusConditionTrue(pkg.Status.Conditions, v1alpha1.Installed) {
		ready += fmt.Sprintf(" (version %s, %s, keeps running)", pkg.Status.Version, short(pkg.Status.Digest))
	}
	setCondition(pkg, v1alpha1.Ready, metav1.ConditionFalse, reason, ready)
	r.event(pkg, corev1.EventTypeWarning, reason, typ, "%s", msg)
	return fmt.Errorf("%w: %w", errSettled, err)
}

// fail reports a failure that is retried (with backoff).
func (r *Reconciler) fail(pkg *v1alpha1.Package, typ, reason string, err error) error {
	setCondition(pkg, typ, metav1.ConditionUnknown, reason, oneLine(err.Error()))
	r.event(pkg, corev1.EventTypeWarning, reason, typ, "%s", oneLine(err.Error()))
	return err
}

// notFound reports a package missing from the registry: retried, it may
// be pushed later.
func (r *Reconciler) notFound(pkg *v1alpha1.Package, err error) error {
	setCondition(pkg, v1alpha1.Verified, metav1.ConditionFalse, v1alpha1.ReasonNotFound, oneLine(err.Error()))
	setCondition(pkg, v1alpha1.Ready, metav1.ConditionFalse, v1alpha1.ReasonNotFound, oneLine(err.Error()))
	return err
}

// progress marks the Package as being worked on, written at once so that
// kubectl and ferry deploy see it.
func (r *Reconciler) progress(ctx context.Context, pkg *v1alpha1.Package, written *v1alpha1.PackageStatus, reason, msg string) error {
	setCondition(pkg, v1alpha1.Ready, metav1.ConditionFalse, reason, msg)
	pkg.Status.ObservedGeneration = pkg.Generation
	pkg.Status.Request = pkg.Annotations[v1alpha1.RequestAnnotation]
	if err := r.writeStatus(ctx, pkg, written); err != nil {
		return err
	}
	*written = *pkg.Status.DeepCopy()
	return nil
}

func conditionIs(pkg *v1alpha1.Package, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(pkg.Status.Conditions, typ)
	return c != nil && c.Status == status && c.Reason == reason
}

func (r *Reconciler) event(pkg *v1alpha1.Package, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pkg, nil, typ, reason, action, note, args...)
	}
}

// writeStatus writes the status when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, pkg *v1alpha1.Package, before *v1alpha1.PackageStatus) error {
	if equality.Semantic.DeepEqual(before, &pkg.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, pkg); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("status of Package %s/%s: %w", pkg.Namespace, pkg.Name, err)
	}
	return nil
}

func setCondition(pkg *v1alpha1.Package, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&pkg.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: pkg.Generation,
	})
}

func short(d string) string {
	_, hexPart, _ := strings.Cut(d, ":")
	if len(hexPart) > 12 {
		hexPart = hexPart[:12]
	}
	return hexPart
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
