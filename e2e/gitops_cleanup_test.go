package e2e

import (
	"context"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
)

// deleteObjects deletes a GitOps test's objects of the kinds gvrs in ns
// while their controllers still run (their finalizers need them), and
// waits, up to timeout, until they are gone.
func deleteObjects(t *testing.T, dyn dynamic.Interface, ns string, timeout time.Duration, gvrs ...schema.GroupVersionResource) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, gvr := range gvrs {
		if err := dyn.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s in %s: %v", gvr.Resource, ns, err)
		}
	}
	for _, gvr := range gvrs {
		for {
			l, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) || (err == nil && len(l.Items) == 0) {
				break
			}
			if ctx.Err() != nil {
				t.Errorf("%s in %s not gone: %v", gvr.Resource, ns, err)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// removeController removes a GitOps controller's package (its
// controllers, RBAC and CRDs go with it) and its namespace ns, and checks,
// up to timeout, that no CRD of a group ours says is its is left.
func removeController(t *testing.T, c *harness.Cluster, pkg *artifact.Reader, ns, what string, timeout time.Duration, ours func(group string) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := removePkg(ctx, c, pkg.Config().Name); err != nil {
		t.Errorf("remove %s: %v", pkg.Config().Name, err)
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", ns, err)
	}
	ext, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		t.Error(err)
		return
	}
	for {
		crds, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		var left []string
		for _, crd := range crds.Items {
			if ours(crd.Spec.Group) {
				left = append(left, crd.Name)
			}
		}
		_, nsErr := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if len(left) == 0 && apierrors.IsNotFound(nsErr) {
			return
		}
		if ctx.Err() != nil {
			t.Errorf("left after removing %s: CRDs %v, namespace %s: %v", what, left, ns, nsErr)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
