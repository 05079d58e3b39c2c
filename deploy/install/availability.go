package install

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// AgentReplicas is how many agent Pods answer the webhook, which fails
// closed: with one, a drain of its node (or its Pod's eviction) leaves Pod
// creations refused until the replacement is Ready elsewhere.
const AgentReplicas = 2

// agentSpread prefers the agent's Pods on different nodes (a single node
// takes both).
func agentSpread() *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey:   corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels()},
			},
		}},
	}}
}

// budget keeps one agent Pod up through voluntary disruptions: a drain
// evicts them one at a time, each waiting for its replacement.
func (in *installer) budget(ctx context.Context) error {
	one := intstr.FromInt32(1)
	want := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: in.ns, Labels: labels()},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &one,
			Selector:       &metav1.LabelSelector{MatchLabels: labels()},
		},
	}
	pdbs := in.cs.PolicyV1().PodDisruptionBudgets(in.ns)
	cur, err := pdbs.Get(ctx, Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := pdbs.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("PodDisruptionBudget %s: %w", Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("PodDisruptionBudget %s: %w", Name, err)
	}
	cur.Labels, cur.Spec = want.Labels, want.Spec
	if _, err := pdbs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("PodDisruptionBudget %s: %w", Name, err)
	}
	return nil
}
