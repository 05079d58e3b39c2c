package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
)

// uninstallRelease uninstalls a release and waits until every object of
// its manifest (but those Helm keeps: helm.sh/resource-policy: keep) is
// gone, bounded by timeout.
//
// It waits itself rather than through Helm's uninstall: an object can come
// back after Helm deleted it. Kubernetes' clusterrole-aggregation
// controller applies the rules of an aggregated ClusterRole (one with an
// aggregationRule) when a ClusterRole it aggregates changes; when that
// ClusterRole is deleted with the others of the release, the controller's
// apply can land after the aggregated one's deletion, and creates it again
// (no labels, no rules). Helm's wait then lasts its whole timeout and leaves
// it. Here an object that is there again under a new UID is deleted again.
func uninstallRelease(ctx context.Context, getter genericclioptions.RESTClientGetter, r Release, timeout time.Duration) error {
	cfg, err := helmConfig(getter, r.Namespace)
	if err != nil {
		return err
	}
	return uninstall(ctx, cfg, r, timeout)
}

// uninstall is uninstallRelease through a Helm configuration of the
// release's namespace.
func uninstall(ctx context.Context, cfg *action.Configuration, r Release, timeout time.Duration) error {
	rest, err := cfg.RESTClientGetter.ToRESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rest)
	if err != nil {
		return err
	}
	rel, err := cfg.Releases.Last(r.Name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", r, err)
	}
	infos, err := cfg.KubeClient.Build(strings.NewReader(rel.Manifest), false)
	if err != nil {
		return fmt.Errorf("release %s: its manifest: %w", r, err)
	}
	var objs []*liveObject
	for _, info := range infos {
		if a, err := meta.Accessor(info.Object); err == nil && strings.TrimSpace(strings.ToLower(a.GetAnnotations()[kube.ResourcePolicyAnno])) == kube.KeepPolicy {
			continue
		}
		o := &liveObject{res: info.Mapping.Resource, kind: info.Mapping.GroupVersionKind.Kind, namespace: info.Namespace, name: info.Name}
		if info.Mapping.Scope.Name() != meta.RESTScopeNameNamespace {
			o.namespace = ""
		}
		if err := o.observe(ctx, dyn); err != nil {
			return fmt.Errorf("release %s: %w", r, err)
		}
		objs = append(objs, o)
	}

	un := action.NewUninstall(cfg)
	un.Timeout, un.IgnoreNotFound = timeout, true
	if _, err := un.Run(r.Name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("uninstall release %s: %w", r, err)
	}
	if err := awaitGone(ctx, dyn, objs, timeout, time.Second); err != nil {
		return fmt.Errorf("uninstall release %s: %w", r, err)
	}
	return nil
}

// liveObject is an object of a release as last seen: uid is empty when it
// was not there.
type liveObject struct {
	res             schema.GroupVersionResource
	kind            string
	namespace, name string
	uid             types.UID
	terminating     bool
}

func (o *liveObject) String() string {
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

func (o *liveObject) client(dyn dynamic.Interface) dynamic.ResourceInterface {
	if o.namespace == "" {
		return dyn.Resource(o.res)
	}
	return dyn.Resource(o.res).Namespace(o.namespace)
}

// observe reads the object's UID (empty when it is not there).
func (o *liveObject) observe(ctx context.Context, dyn dynamic.Interface) error {
	_, err := o.get(ctx, dyn)
	return err
}

// get reads the object; it tells whether the object is there under
// another UID than last seen (created again), and remembers the new one.
func (o *liveObject) get(ctx context.Context, dyn dynamic.Interface) (again bool, err error) {
	u, err := o.client(dyn).Get(ctx, o.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		o.uid, o.terminating = "", false
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", o, err)
	}
	again = u.GetUID() != o.uid
	o.uid, o.terminating = u.GetUID(), u.GetDeletionTimestamp() != nil
	return again, nil
}

// settle is how long every object of a release must stay gone before
// awaitGone trusts it: an object is created again right after its
// deletion, when at all.
const settle = 2 * time.Second

// awaitGone polls objs every interval until every one has been gone for
// settle, deleting again one that is there under a new UID (or that was
// not there before the uninstall). Past timeout, the error names those
// still there.
func awaitGone(ctx context.Context, dyn dynamic.Interface, objs []*liveObject, timeout, interval time.Duration) error {
	deadline := time.Now().Add(timeout)
	var goneSince time.Time
	for {
		var left []string
		for _, o := range objs {
			again, err := o.get(ctx, dyn)
			if err != nil {
				return err
			}
			if o.uid == "" {
				continue
			}
			if again {
				prop := metav1.DeletePropagationBackground
				err := o.client(dyn).Delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &prop, Preconditions: &metav1.Preconditions{UID: &o.uid}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					return fmt.Errorf("delete %s again: %w", o, err)
				}
			}
			state := "there"
			if o.terminating {
				state = "terminating"
			}
			left = append(left, o.String()+" ("+state+")")
		}
		now := time.Now()
		switch {
		case len(left) > 0:
			goneSince = time.Time{}
		case goneSince.IsZero():
			goneSince = now
		case now.Sub(goneSince) >= settle:
			return nil
		}
		if now.After(deadline) {
			if len(left) == 0 {
				return nil
			}
			return fmt.Errorf("after %s, %d objects of the release are still there: %s", timeout, len(left), strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
