package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// PullSecrets keeps copies of the registry pull secret in the namespaces of
// the Pods the webhook sends to the registry: a Pod can only use a pull
// secret of its own namespace. Use Ensure as Webhook.EnsurePullSecret.
//
// The agent needs, cluster-wide, create on Secrets and get and update on
// Secrets named Name; and get on the original.
type PullSecrets struct {
	Client kubernetes.Interface
	// Namespace holds the original, named Name; the copies take its name,
	// type and data.
	Namespace, Name string
}

// Ensure makes the copy in namespace current: created when missing,
// updated when its data differs from the original's. A Secret of that
// name that ferry did not make (no app.kubernetes.io/managed-by=ferry) is
// someone's own choice, left as it is.
func (p *PullSecrets) Ensure(ctx context.Context, namespace string) error {
	if namespace == p.Namespace {
		return nil
	}
	orig, err := p.Client.CoreV1().Secrets(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read %s/%s: %w", p.Namespace, p.Name, err)
	}
	secrets := p.Client.CoreV1().Secrets(namespace)
	cur, err := secrets.Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cp := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: namespace, Labels: copyLabels(orig.Labels)},
			Type:       orig.Type,
			Data:       orig.Data,
		}
		_, err = secrets.Create(ctx, cp, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // another Pod of the namespace, at the same time
			err = nil
		}
	case err == nil && cur.Labels[cluster.LabelManagedBy] == cluster.ManagedBy && !maps.EqualFunc(cur.Data, orig.Data, bytes.Equal):
		cur.Data = orig.Data
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("copy %s/%s to %s: %w", p.Namespace, p.Name, namespace, err)
	}
	return nil
}

// copyLabels are the labels of a copy: the original's (an Argo CD
// repo-creds Secret keeps its type label), marked as ferry's.
func copyLabels(orig map[string]string) map[string]string {
	l := maps.Clone(orig)
	if l == nil {
		l = map[string]string{}
	}
	l[cluster.LabelManagedBy] = cluster.ManagedBy
	return l
}
