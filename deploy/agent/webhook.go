package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// maxReviewSize bounds an AdmissionReview request body.
const maxReviewSize = 4 << 20

// Webhook serves the mutating admission webhook: it answers an
// AdmissionReview v1 for a Pod with a JSONPatch that rewrites its images
// (see Rewriter.Pod) and adds the registry pull secret, or refuses the Pod
// when the policy requires known images and one is not. Anything it cannot
// decide is refused (fail closed): a Pod admitted unrewritten would pull by
// tag.
type Webhook struct {
	// Rewriter returns the rewriter to use for a request, so the images
	// deployed packages recorded can change while the webhook runs.
	Rewriter func(context.Context) (*Rewriter, error)
	// Refresh, if set, is called when a Pod names an image that Rewriter's
	// images do not know, for a rewriter that re-read them: deploy records
	// a package just before it installs the workloads that use its images.
	Refresh func(context.Context) (*Rewriter, error)
	// PullSecret is added to every Pod whose images point at the registry.
	PullSecret string
	// EnsurePullSecret, if set, is called before such a Pod is admitted
	// (except on a dry run), so that PullSecret exists in its namespace.
	EnsurePullSecret func(ctx context.Context, namespace string) error
	// Ignore says whether to leave a namespace's Pods alone (ferry's own
	// namespace, namespaces labelled to be ignored).
	Ignore func(namespace string) bool
	// Sources, if set, returns the rewriter of GitOps sources (Flux
	// GitRepository, OCIRepository and HelmRepository, Argo CD Application
	// and ApplicationSet) over what deployed packages carry; EnsureSecret,
	// if set, makes sure a Secret of ferry's a rewritten source now names
	// exists in its namespace (Result.Secrets); EnsureHelmRepository, if
	// set, that an Argo CD repository Secret for an in-cluster OCI Helm
	// repository does (Result.HelmRepositories).
	Sources              func(context.Context) (*SourceRewriter, error)
	EnsureSecret         func(ctx context.Context, namespace, name string) error
	EnsureHelmRepository func(ctx context.Context, namespace, url string) error
	// Verifier checks the images a signature policy covers (see
	// Rewriter.Checks) before the Pod is admitted; a Pod with such an
	// image is refused when it is nil.
	Verifier *Verifier
	// Logger receives one record per decision; nil discards them.
	Logger *slog.Logger
}

var _ http.Handler = (*Webhook)(nil)

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	var review admissionv1.AdmissionReview
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewSize))
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err != nil || review.Request == nil {
		http.Error(w, "invalid AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := h.review(r.Context(), review.Request)
	resp.UID = review.Request.UID
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// review decides on one request.
func (h *Webhook) review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if h.Ignore != nil && h.Ignore(req.Namespace) {
		return allow
	}
	if (req.Kind.Group == cluster.FluxGroup || req.Kind.Group == cluster.ArgoGroup) && h.Sources != nil {
		return h.reviewSource(ctx, req)
	}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" {
		return allow
	}
	log := h.logger().With("namespace", req.Namespace, "name", req.Name, "operation", req.Operation, "uid", req.UID)
	if req.SubResource != "" {
		log = log.With("subresource", req.SubResource)
	}
	refuse := func(code int32, err error) *admissionv1.AdmissionResponse {
		log.Warn("refused", "error", err)
		return deny(code, "ferry agent: "+err.Error())
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return refuse(http.StatusBadRequest, fmt.Errorf("invalid Pod: %w", err))
	}
	if req.Name == "" {
		log = log.With("generateName", pod.GenerateName)
	}
	rw, err := h.Rewriter(ctx)
	if err == nil && h.Refresh != nil && rw.unknown(&pod) {
		rw, err = h.Refresh(ctx)
	}
	if err != nil {
		return refuse(http.StatusInternalServerError, err)
	}
	if resp := h.verify(ctx, rw, &pod, log, refuse); resp != nil {
		return resp
	}
	changes, err := rw.Pod(&pod)
	if err != nil {
		return refuse(http.StatusForbidden, err)
	}
	var ops []patchOp
	for _, c := range changes {
		ops = append(ops, patchOp{Op: "replace", Path: c.Path, Value: c.New})
	}
	if h.PullSecret != "" && usesRegistry(&pod, rw.Registry) {
		if h.EnsurePullSecret != nil && (req.DryRun == nil || !*req.DryRun) {
			if err := h.EnsurePullSecret(ctx, req.Namespace); err != nil {
				return refuse(http.StatusInternalServerError, fmt.Errorf("pull secret %s: %w", h.PullSecret, err))
			}
		}
		if !hasSecret(&pod, h.PullSecret) {
			ref := corev1.LocalObjectReference{Name: h.PullSecret}
			if len(pod.Spec.ImagePullSecrets) == 0 {
				ops = append(ops, patchOp{Op: "add", Path: "/spec/imagePullSecrets", Value: []corev1.LocalObjectReference{ref}})
			} else {
				ops = append(ops, patchOp{Op: "add", Path: "/spec/imagePullSecrets/-", Value: ref})
			}
		}
	}
	if len(ops) == 0 {
		log.Debug("admitted unchanged")
		return allow
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return refuse(http.StatusInternalServerError, err)
	}
	for _, c := range changes {
		log.Info("rewrote", "path", c.Path, "from", c.Old, "to", c.New)
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = patch, &pt
	return allow
}

// verify checks the images of pod that a signature policy covers, before
// they are rewritten; it returns the refusal, or nil.
func (h *Webhook) verify(ctx context.Context, rw *Rewriter, pod *corev1.Pod, log *slog.Logger, refuse func(int32, error) *admissionv1.AdmissionResponse) *admissionv1.AdmissionResponse {
	checks, err := rw.Checks(pod)
	if err != nil {
		return refuse(http.StatusForbidden, err)
	}
	if len(checks) > 0 && h.Verifier != nil {
		// One deadline for the Pod's images: the API server waits 10 s.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Verifier.timeout())
		defer cancel()
	}
	for _, c := range checks {
		if h.Verifier == nil {
			return refuse(http.StatusInternalServerError, fmt.Errorf("image %s: policy %q not checked: the agent has no verifier", c.Name(), c.Policy.Name))
		}
		res, cached, err := h.Verifier.Verify(ctx, c)
		var pe *PolicyError
		switch {
		case errors.As(err, &pe) && pe.Op != "":
			return refuse(http.StatusServiceUnavailable, err)
		case err != nil:
			return refuse(http.StatusForbidden, err)
		}
		log.Info("verified", "image", c.Name(), "ref", c.Image, "policy", c.Policy.Name, "subject", res.Subject, "signers", res.Signers, "attestations", res.Attestations, "cached", cached)
	}
	return nil
}

// reviewSource rewrites a GitOps source that names a carried repository.
func (h *Webhook) reviewSource(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	log := h.logger().With("kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation, "uid", req.UID)
	refuse := func(code int32, err error) *admissionv1.AdmissionResponse {
		log.Warn("refused", "error", err)
		return deny(code, "ferry agent: "+err.Error())
	}
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return refuse(http.StatusBadRequest, fmt.Errorf("invalid %s: %w", req.Kind.Kind, err))
	}
	s, err := h.Sources(ctx)
	if err != nil {
		return refuse(http.StatusInternalServerError, err)
	}
	res, err := s.Rewrite(req.Kind.Kind, obj)
	if err != nil {
		return refuse(http.StatusForbidden, err)
	}
	if !res.Changed {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	if req.DryRun == nil || !*req.DryRun {
		for _, name := range res.Secrets {
			if h.EnsureSecret == nil {
				break
			}
			if err := h.EnsureSecret(ctx, req.Namespace, name); err != nil {
				return refuse(http.StatusInternalServerError, fmt.Errorf("secret %s: %w", name, err))
			}
		}
		for _, url := range res.HelmRepositories {
			if h.EnsureHelmRepository == nil {
				break
			}
			if err := h.EnsureHelmRepository(ctx, req.Namespace, url); err != nil {
				return refuse(http.StatusInternalServerError, fmt.Errorf("Argo CD repository %s: %w", url, err))
			}
		}
	}
	patch, err := json.Marshal([]patchOp{{Op: "replace", Path: "/spec", Value: obj["spec"]}})
	if err != nil {
		return refuse(http.StatusInternalServerError, err)
	}
	log.Info("rewrote source", "spec", obj["spec"])
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

func (h *Webhook) logger() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

func deny(code int32, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}}
}

// usesRegistry reports whether any image of pod is in the registry at host.
func usesRegistry(pod *corev1.Pod, host string) bool {
	for _, image := range podImages(pod) {
		if strings.HasPrefix(image, host+"/") {
			return true
		}
	}
	return false
}

func hasSecret(pod *corev1.Pod, name string) bool {
	for _, s := range pod.Spec.ImagePullSecrets {
		if s.Name == name {
			return true
		}
	}
	return false
}

// String describes a change for logs.
func (c Change) String() string { return fmt.Sprintf("%s: %s → %s", c.Path, c.Old, c.New) }
