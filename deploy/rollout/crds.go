package rollout

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// A chart's crds/ folders hold CustomResourceDefinitions that Helm creates
// before the first install when they are missing, and never updates nor
// deletes: deleting a CRD deletes every custom resource of it, in every
// namespace. ferry records which of them a release's install created
// (Release.CreatedCRDs) and remove deletes those, but only when no other
// deployed package's chart carries them and no custom resource of theirs is
// left (UninstallResult.KeptCRDs says which it kept and why).

// chartCRDs lists the names of the CRDs in the crds/ folders of ch and its
// subcharts, and, if lookup, those of them the cluster does not have.
func chartCRDs(cfg *action.Configuration, ch *chart.Chart, lookup bool) (all, absent []string, err error) {
	for _, crd := range ch.CRDObjects() {
		res, err := cfg.KubeClient.Build(bytes.NewReader(crd.File.Data), false)
		if err != nil {
			return nil, nil, fmt.Errorf("CRDs of chart %s: %s: %w", ch.Name(), crd.Filename, err)
		}
		for _, info := range res {
			all = append(all, info.Name)
			if !lookup {
				continue
			}
			if err := info.Get(); apierrors.IsNotFound(err) {
				absent = append(absent, info.Name)
			} else if err != nil {
				return nil, nil, fmt.Errorf("CRD %s: %w", info.Name, err)
			}
		}
	}
	slices.Sort(all)
	slices.Sort(absent)
	return slices.Compact(all), slices.Compact(absent), nil
}

// removableCRDs are the CRDs the releases of rec created that no chart of
// others carries.
func removableCRDs(rec *Record, others []*Record) []string {
	carried := map[string]bool{}
	for _, o := range others {
		for _, r := range o.Releases {
			for _, n := range r.CRDs {
				carried[n] = true
			}
		}
	}
	var out []string
	for _, r := range rec.Releases {
		for _, n := range r.CreatedCRDs {
			if !carried[n] && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// crdRemover deletes CRDs.
type crdRemover struct {
	ext     apiextensionsclient.Interface
	dyn     dynamic.Interface
	timeout time.Duration
}

// remove deletes each CRD of names that has no custom resource left and
// waits until it is gone; it returns those deleted and, as "name: reason",
// those kept. One already gone counts as deleted.
func (c crdRemover) remove(ctx context.Context, names []string) (deleted, kept []string, err error) {
	crds := c.ext.ApiextensionsV1().CustomResourceDefinitions()
	for _, n := range names {
		crd, err := crds.Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			deleted = append(deleted, n)
			continue
		}
		if err != nil {
			return deleted, kept, fmt.Errorf("CRD %s: %w", n, err)
		}
		left, err := c.customResources(ctx, crd)
		if err != nil {
			return deleted, kept, err
		}
		if left > 0 {
			kept = append(kept, fmt.Sprintf("%s: custom resources left", n))
			continue
		}
		if err := crds.Delete(ctx, n, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &crd.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return deleted, kept, fmt.Errorf("delete CRD %s: %w", n, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, c.timeout, true, func(ctx context.Context) (bool, error) {
			_, err := crds.Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			return deleted, kept, fmt.Errorf("delete CRD %s: %w", n, err)
		}
		deleted = append(deleted, n)
	}
	return deleted, kept, nil
}

// customResources counts (up to 1) the custom resources of crd, in every
// namespace, through its storage version.
func (c crdRemover) customResources(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (int, error) {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage || version == "" && v.Served {
			version = v.Name
		}
	}
	if version == "" {
		return 0, nil
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	list, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("custom resources of CRD %s: %w", crd.Name, err)
	}
	return len(list.Items), nil
}
