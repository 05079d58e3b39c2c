package dashboard

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// objectState reads an object a Package applied and says whether it is
// ready: workloads by their replicas, Jobs by completion, Pods by their
// Ready condition, anything else by being there.
func objectState(ctx context.Context, a *actor, o v1alpha1.ObjectStatus) objectView {
	v := objectView{ObjectStatus: o}
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		v.State = err.Error()
		return v
	}
	m, err := a.mapper.RESTMapping(gv.WithKind(o.Kind).GroupKind(), gv.Version)
	if err != nil {
		v.State = "unknown kind: " + oneLine(err.Error())
		return v
	}
	ri := a.dyn.Resource(m.Resource)
	var obj *unstructured.Unstructured
	if o.Namespace != "" {
		obj, err = ri.Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	} else {
		obj, err = ri.Get(ctx, o.Name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		v.State = "missing (the controller puts it back at its next resync)"
		return v
	case err != nil:
		v.State = oneLine(err.Error())
		return v
	}
	v.OK, v.State = ready(obj)
	return v
}

// ready tells an object's readiness, in kubectl's words.
func ready(obj *unstructured.Unstructured) (bool, string) {
	if obj.GetDeletionTimestamp() != nil {
		return false, "being deleted"
	}
	num := func(path ...string) int64 {
		n, _, _ := unstructured.NestedInt64(obj.Object, path...)
		return n
	}
	gen, observed := obj.GetGeneration(), num("status", "observedGeneration")
	switch obj.GetObjectKind().GroupVersionKind().GroupKind() {
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}, schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}:
		want, ok, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		if !ok {
			want = 1
		}
		got := num("status", "readyReplicas")
		if observed < gen {
			return false, "rolling out"
		}
		return got >= want, fmt.Sprintf("%d/%d ready", got, want)
	case schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		want, got := num("status", "desiredNumberScheduled"), num("status", "numberReady")
		return observed >= gen && got >= want, fmt.Sprintf("%d/%d ready", got, want)
	case schema.GroupKind{Group: "batch", Kind: "Job"}:
		if num("status", "succeeded") > 0 {
			return true, "complete"
		}
		if num("status", "failed") > 0 {
			return false, "failed"
		}
		return false, "running"
	case schema.GroupKind{Kind: "Pod"}:
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
				return m["status"] == "True", "Ready=" + fmt.Sprint(m["status"])
			}
		}
		phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		return false, phase
	}
	return true, "present"
}
