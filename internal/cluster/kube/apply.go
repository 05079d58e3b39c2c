// Package kube holds the client-go steps that ferry init, the agent's
// installer and remove share: creating or updating the objects they own,
// and the waits that follow — for a rollout, a Ready pod, a deletion, an
// HTTP answer at a NodePort — whose errors tell a failing pod's state and
// last events.
package kube

import (
	"context"
	"fmt"
	"net"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// SecretClient is the part of the Secrets client ApplySecret needs.
type SecretClient interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Secret, error)
	Create(context.Context, *corev1.Secret, metav1.CreateOptions) (*corev1.Secret, error)
	Update(context.Context, *corev1.Secret, metav1.UpdateOptions) (*corev1.Secret, error)
}

// ApplySecret creates s or updates its data, type and labels in place.
func ApplySecret(ctx context.Context, c SecretClient, s *corev1.Secret) error {
	cur, err := c.Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, s, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cur.Data, cur.Type, cur.Labels = s.Data, s.Type, s.Labels
	_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// ApplyDeployment creates d or updates its spec and labels in place.
func ApplyDeployment(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) error {
	c := cs.AppsV1().Deployments(d.Namespace)
	cur, err := c.Get(ctx, d.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, d, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cur.Spec, cur.Labels = d.Spec, d.Labels
	_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// ObjectClient is the part of a typed client Upsert needs.
type ObjectClient[T any] interface {
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// Upsert creates want, or copies what the caller manages of it into the
// current object with merge and updates that, unless nothing changed. An
// object deleted meanwhile (by the garbage collector, its owner gone) is
// created again.
func Upsert[T interface {
	metav1.Object
	runtime.Object
}](ctx context.Context, c ObjectClient[T], want T, merge func(cur, want T)) error {
	cur, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
	} else if err == nil {
		before := cur.DeepCopyObject()
		merge(cur, want)
		if !apiequality.Semantic.DeepEqual(before, runtime.Object(cur)) {
			_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if apierrors.IsNotFound(err) {
			want.SetResourceVersion("")
			_, err = c.Create(ctx, want, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("%T %s: %w", want, want.GetName(), err)
	}
	return nil
}

// ServiceHost is how Pods reach Service name of namespace ns: its cluster
// IP and first port (no cluster DNS needed).
func ServiceHost(ctx context.Context, cs kubernetes.Interface, ns, name string) (string, error) {
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("Service %s/%s: %w", ns, name, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
		return "", fmt.Errorf("Service %s/%s has no cluster IP and port", ns, name)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), nil
}
