package install

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webhook registers the agent for Pods created, and updated when an image
// changes (an ephemeral container is added through an update of the
// pods/ephemeralcontainers subresource), outside ferry's namespace, the
// system namespace and namespaces labelled to be ignored. It fails closed.
func (in *installer) webhook(ctx context.Context, caBundle []byte) error {
	w := webhookConfiguration(in.ns, caBundle, in.owner)
	return kube.Upsert(ctx, in.cs.AdmissionregistrationV1().MutatingWebhookConfigurations(), w, func(cur, want *admissionregistrationv1.MutatingWebhookConfiguration) {
		// Trust is added, never taken: the controller trims the bundle
		// once no agent presents a certificate from an older CA.
		bundle := caBundle
		for _, h := range cur.Webhooks {
			bundle = servingcert.Union(h.ClientConfig.CABundle, bundle, time.Now())
		}
		cur.Labels, cur.OwnerReferences, cur.Webhooks = want.Labels, want.OwnerReferences, want.Webhooks
		for i := range cur.Webhooks {
			cur.Webhooks[i].ClientConfig.CABundle = bundle
		}
	})
}

// webhookConfiguration is the registration webhook applies: Pods, and
// the GitOps sources that may name carried repositories.
func webhookConfiguration(ns string, caBundle []byte, owner []metav1.OwnerReference) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName(ns), Labels: labels(), OwnerReferences: owner},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			// Updates that change no image (labels, finalizers, …) do not
			// wait for the agent, nor fail when it is down.
			mutatingWebhook(ns, caBundle, "pods.agent.ferry.dev", "creates-or-changes-images", matchExpression,
				rule("", "v1", "pods", "pods/ephemeralcontainers")),
			// GitOps sources naming a carried repository are pointed at
			// the in-cluster copies (SourceRewriter). Status updates (Argo
			// CD writes status into the object) do not wait for the agent.
			mutatingWebhook(ns, caBundle, "sources.agent.ferry.dev", "creates-or-changes-spec", sourcesMatchExpression,
				rule(cluster.FluxGroup, "*", "gitrepositories", "ocirepositories", "helmrepositories"), rule(cluster.ArgoGroup, "*", "applications", "applicationsets", "appprojects")),
		},
	}
}

// rule selects creations and updates of resources of group/version.
func rule(group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.NamespacedScope
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources, Scope: &scope},
	}
}

// mutatingWebhook calls the agent for rules outside ferry's namespace,
// the system namespace and namespaces labelled to be ignored, when the
// CEL expression holds. It fails closed.
func mutatingWebhook(ns string, caBundle []byte, name, condition, expression string, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.MutatingWebhook {
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun // it copies Secrets
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	return admissionregistrationv1.MutatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: Name, Path: ptr(cluster.AgentPathMutate), Port: ptr(int32(443))},
			CABundle: caBundle,
		},
		Rules:          rules,
		ObjectSelector: &metav1.LabelSelector{}, // as the API server defaults it
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns, SystemNamespace}},
			{Key: IgnoreLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{IgnoreValue}},
		}},
		MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: condition, Expression: expression}},
		FailurePolicy:           &fail,
		MatchPolicy:             &equivalent,
		SideEffects:             &sideEffects,
		TimeoutSeconds:          ptr(int32(10)),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      &reinvoke,
	}
}

// sourcesMatchExpression (CEL) selects creations and updates that change
// a source's spec.
const sourcesMatchExpression = `request.operation == 'CREATE' || !has(oldObject.spec) || !has(object.spec) || object.spec != oldObject.spec`

// matchExpression (CEL) selects creations, the ephemeral containers
// subresource, and updates that change an image. An error evaluating it
// would refuse the request (failurePolicy Fail): absent fields are tested
// with has() first.
const matchExpression = `request.operation == 'CREATE' ||
(has(request.subResource) && request.subResource == 'ephemeralcontainers') ||
object.spec.containers.map(c, c.image) != oldObject.spec.containers.map(c, c.image) ||
(has(object.spec.initContainers) ? object.spec.initContainers.map(c, c.image) : []) !=
  (has(oldObject.spec.initContainers) ? oldObject.spec.initContainers.map(c, c.image) : [])`

// check asks the API server, in a dry run, to create a Pod in the default
// namespace from the agent's image: when the agent answers, the Pod comes
// back with the pull secret added. A namespace the agent leaves alone, or a
// refusal by something else (a policy of that namespace), leaves it
// unchecked; an error calling the webhook until the time is up fails.
func (in *installer) check(ctx context.Context) (string, error) {
	const ns = metav1.NamespaceDefault
	if ns == in.ns {
		return "not checked (ferry runs in " + ns + ")", nil
	}
	f, t := false, true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ferry-agent-check-", Labels: labels()},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &f,
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: &t, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "check", Image: in.image,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	var last error
	start := time.Now()
	// What it waits for (the API server seeing the webhook and the agent's
	// endpoint) no watch tells: a dry run every 100 ms.
	err := kube.PollEvery(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		got, err := in.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		for _, s := range got.Spec.ImagePullSecrets {
			if s.Name == cluster.PullSecretName {
				return true, nil
			}
		}
		// Not called: the namespace is left alone, or the API server has
		// not seen the webhook yet.
		if n, err := in.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.Labels[IgnoreLabel] == IgnoreValue {
			return false, errIgnored
		}
		last = errors.New("the API server does not call the agent yet")
		return false, nil
	}, "the agent does not answer the API server")
	switch {
	case err == nil:
		return fmt.Sprintf("answering the API server (%.1fs)", time.Since(start).Seconds()), nil
	case errors.Is(err, errIgnored):
		return "not checked (namespace " + ns + " is ignored)", nil
	case last != nil && !strings.Contains(last.Error(), "webhook"):
		return "not checked (" + strings.Join(strings.Fields(last.Error()), " ") + ")", nil
	}
	return "", fmt.Errorf("%w: %w", err, last)
}

var errIgnored = errors.New("ignored")
