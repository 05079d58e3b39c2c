package centre

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// DefaultCRDTimeout bounds EnsureCRDs' wait for the CRDs to be
// established.
const DefaultCRDTimeout = time.Minute

// EnsureCRDs applies the fleet's CustomResourceDefinitions
// (v1alpha1.CRDs) to the management cluster, creating or updating each,
// and waits until the API server serves them all.
func (c *Centre) EnsureCRDs(ctx context.Context, ext apiextensionsclient.Interface) error {
	crds, err := v1alpha1.CRDs()
	if err != nil {
		return err
	}
	api := ext.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		err := kube.Upsert(ctx, api, crd, func(cur, want *apiextensionsv1.CustomResourceDefinition) {
			cur.Spec = want.Spec
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				cur.Labels[k] = v
			}
		})
		if err != nil {
			return fmt.Errorf("apply CustomResourceDefinition %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := kube.Poll(ctx, DefaultCRDTimeout, func() (bool, error) {
			cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range cur.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}, "CustomResourceDefinition "+crd.Name+" is not established")
		if err != nil {
			return err
		}
	}
	return nil
}

// EnsureNamespace makes the centre's namespace if it is missing.
func (c *Centre) EnsureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns()}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("make the centre's namespace %s: %w", c.ns(), err)
	}
	return nil
}
