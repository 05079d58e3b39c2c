package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Deploy is the one way a package is deployed (Helm's pkg/action is the
// model: set the fields, then Run). `ferry deploy`, the agent's upload
// endpoint (and through it the dashboard) and the tests all run it; the
// Package controller (package deploy/controller) does the cluster's half.
type Deploy struct {
	// Client reaches the cluster's core API; Packages its Package API
	// (PackageClient).
	Client   kubernetes.Interface
	Packages client.WithWatch
	// Namespace is ferry's namespace; cluster.DefaultNamespace if empty.
	Namespace string

	// Keys verify the package before anything is pushed, and each is
	// stored in a Secret of the namespace (EnsureKeySecret) that the
	// Package names: the controller verifies the package again with them.
	Keys []*artifact.PublicKey
	// KeySecrets name keys already stored in Secrets (the cluster's
	// trusted keys that signed an upload), for the Package to name too.
	KeySecrets []v1alpha1.KeyReference
	// Verified tells that the caller has just verified the package against
	// Keys or KeySecrets (a pull that verified as it downloaded, the upload
	// endpoint): Run does not hash it once more before pushing (the push
	// still checks every blob it reads).
	Verified bool
	// InsecureSkipSignatureVerification deploys without a key: every blob
	// is still re-hashed, here and in the cluster.
	InsecureSkipSignatureVerification bool

	// Components selects components by name (required ones always come
	// along); all of them when empty.
	Components []string
	// Values are given to every chart (as helm --set builds them: ParseSet).
	Values map[string]any
	// Timeout bounds the wait for each chart's and bundle's resources;
	// DefaultTimeout if 0.
	Timeout time.Duration

	// Registry is where this process reaches the in-cluster registry
	// (host:port, e.g. a tunnel's local address from package
	// internal/cluster/reach); the registry's address on the nodes if empty.
	Registry string
	// PushAttempts bounds the pushes when the connection to the registry
	// breaks (each attempt skips the blobs the registry has by then);
	// reach.DefaultAttempts if ≤ 0.
	PushAttempts int

	// Labels are set on the Package (those it has already are kept): the
	// fleet member marks the Packages a placement put there.
	Labels map[string]string

	// NoWait returns once the Package is applied, without waiting for the
	// controller.
	NoWait bool
	// Progress, if set, receives an event per blob verified and pushed.
	Progress artifact.ProgressFunc
	// Events, if set, is told each step: pushed, applied, and every
	// condition of the Package as the controller changes it.
	Events func(Event)
}

// The phases of an Event.
const (
	PhasePushed    = "pushed"
	PhaseApplied   = "applied"
	PhaseCondition = "condition"
)

// Event is one step of a deploy.
type Event struct {
	Phase string
	// Pushed is set with PhasePushed.
	Pushed *Pushed
	// Package is set with PhaseApplied: the object as written.
	Package *v1alpha1.Package
	// Condition is set with PhaseCondition.
	Condition *metav1.Condition
}

// Result is what a deploy did.
type Result struct {
	// Pushed is what the push uploaded.
	Pushed *Pushed
	// Package is the Package applied, as last seen: as written with
	// NoWait, else as the controller's last answer left it.
	Package *v1alpha1.Package
	// Record is the controller's record of what it installed; nil with
	// NoWait.
	Record *rollout.Record
}

// Run verifies the package fail closed (Keys, or only its blobs with
// InsecureSkipSignatureVerification; nothing is pushed unless it passes),
// pushes it into the in-cluster registry `ferry init` set up (the package
// under its name with its signatures, its images under their original paths
// by the digests it recorded, blobs already there skipped), applies its
// Package — by digest, with the keys, components, values and timeout — and
// waits until the controller reports it Ready, or returns the condition
// that says why not. Once the Package is applied, an error comes with the
// Result so far (the Package as last seen).
func (d *Deploy) Run(ctx context.Context, r *artifact.Reader) (*Result, error) {
	if d.Namespace == "" {
		d.Namespace = cluster.DefaultNamespace
	}
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	if _, err := rollout.SelectComponents(r.Config(), d.Components); err != nil {
		return nil, err
	}
	if err := d.verify(ctx, r); err != nil {
		return nil, err
	}
	pushed, err := push(ctx, d.Client, r, d.Namespace, d.Registry, d.PushAttempts, d.Progress)
	if err != nil {
		return nil, err
	}
	d.event(Event{Phase: PhasePushed, Pushed: pushed})
	spec, err := d.spec(ctx, r)
	if err != nil {
		return nil, err
	}
	pkg, request, err := ApplyPackage(ctx, d.Packages, d.Namespace, r.Config().Name, spec, d.Labels)
	if err != nil {
		return nil, err
	}
	d.event(Event{Phase: PhaseApplied, Package: pkg})
	res := &Result{Pushed: pushed, Package: pkg}
	name := pkg.Namespace + "/" + pkg.Name
	if d.NoWait {
		return res, nil
	}
	wait := WaitTimeout(r.Config(), d.Timeout)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	final, err := WaitPackage(wctx, d.Packages, pkg, request, func(c metav1.Condition) {
		d.event(Event{Phase: PhaseCondition, Condition: &c})
	})
	if final != nil {
		res.Package = final
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("Package %s: no answer from the controller in %s (is Deployment %s/%s running?)", name, wait, d.Namespace, cluster.ControllerName)
	}
	if err != nil {
		return res, err
	}
	rec, err := (&rollout.State{Client: d.Client, Namespace: d.Namespace}).Get(ctx, r.Config().Name)
	if err != nil {
		return res, err
	}
	if rec == nil {
		return res, fmt.Errorf("Package %s is Ready but its record is missing", name)
	}
	rec.BytesPushed = pushed.BytesPushed
	rec.PushTook = pushed.Took
	res.Record = rec
	return res, nil
}

func (d *Deploy) event(ev Event) {
	if d.Events != nil {
		d.Events(ev)
	}
}

// verify checks the package once, before anything is pushed.
func (d *Deploy) verify(ctx context.Context, r *artifact.Reader) error {
	switch {
	case d.Verified && (len(d.Keys) > 0 || len(d.KeySecrets) > 0):
		return nil
	case len(d.Keys) > 0:
		_, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: artifact.Verifiers(d.Keys), Progress: d.Progress})
		return err
	case d.InsecureSkipSignatureVerification:
		_, err := artifact.Inspect(ctx, r, "", d.Progress)
		return err
	}
	return ErrUnsigned
}

// spec is the Package that asks the controller for this deploy.
func (d *Deploy) spec(ctx context.Context, r *artifact.Reader) (v1alpha1.PackageSpec, error) {
	spec := v1alpha1.PackageSpec{
		Repository: r.Config().Name, Digest: r.Root().Digest.String(), Components: d.Components,
		InsecureSkipSignatureVerification: d.InsecureSkipSignatureVerification,
		Timeout:                           &metav1.Duration{Duration: d.Timeout},
	}
	if len(d.Values) > 0 {
		raw, err := json.Marshal(d.Values)
		if err != nil {
			return spec, err
		}
		spec.Values = &apiextensionsv1.JSON{Raw: raw}
	}
	for _, k := range d.Keys {
		ref, err := EnsureKeySecret(ctx, d.Client, d.Namespace, k.PEM())
		if err != nil {
			return spec, err
		}
		spec.Keys = append(spec.Keys, ref)
	}
	spec.Keys = append(spec.Keys, d.KeySecrets...)
	return spec, nil
}

// WaitTimeout bounds the wait for the controller: each chart and bundle
// may take timeout, and verification as long again.
func WaitTimeout(cfg *artifact.Config, timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	n := 2
	for _, c := range cfg.Components {
		n += len(c.Charts) + len(c.Manifests)
	}
	return time.Duration(n) * timeout
}
