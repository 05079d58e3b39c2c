package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/opencontainers/go-digest"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ferrypkg/ferry/artifact"
)

const host = "127.0.0.1:31999"

var (
	appDigest  = digest.FromString("app stored")
	appOrig    = digest.FromString("app original index")
	toolDigest = digest.FromString("tool stored")
)

func testRewriter(t *testing.T, requireKnown bool) *Rewriter {
	t.Helper()
	images := Images{}
	err := images.Add(&artifact.Config{Name: "demo", Version: "1", Components: []artifact.Component{{
		Name: "web",
		Images: []artifact.Image{
			{Ref: "docker.io/library/app:1.0", OriginalDigest: appOrig, Digest: appDigest},
			{Ref: "ghcr.io/org/tool:v2", Digest: toolDigest},
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return &Rewriter{Registry: host, Images: images, RequireKnown: requireKnown}
}

func TestRewrite(t *testing.T) {
	rw := testRewriter(t, false)
	strict := testRewriter(t, true)
	app := host + "/library/app@" + appDigest.String()
	for _, c := range []struct{ in, want string }{
		{"docker.io/library/app:1.0", app},
		{"app:1.0", app},
		{"library/app:1.0", app},
		{"docker.io/library/app@" + appOrig.String(), app},
		{"docker.io/library/app@" + appDigest.String(), app},
		{"ghcr.io/org/tool:v2", host + "/org/tool@" + toolDigest.String()},
		{app, app}, // already rewritten: idempotent
		{"docker.io/library/app:2.0", "docker.io/library/app:2.0"},
		{"quay.io/other/thing", "quay.io/other/thing"},
	} {
		got, err := rw.Rewrite(c.in)
		if err != nil || got != c.want {
			t.Errorf("Rewrite(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, unknown := range []string{"docker.io/library/app:2.0", "ghcr.io/org/tool@" + appDigest.String()} {
		if _, err := strict.Rewrite(unknown); !errors.Is(err, ErrUnknownImage) {
			t.Errorf("RequireKnown Rewrite(%q): %v, want ErrUnknownImage", unknown, err)
		}
	}
	if _, err := rw.Rewrite("Not A Reference"); err == nil {
		t.Error("an invalid reference was accepted")
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "apps"},
		Spec: corev1.PodSpec{
			InitContainers:      []corev1.Container{{Name: "init", Image: "ghcr.io/org/tool:v2"}},
			Containers:          []corev1.Container{{Name: "app", Image: "app:1.0"}, {Name: "side", Image: "quay.io/other/thing:1"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "docker.io/library/app@" + appOrig.String()}}},
		},
	}
}

// admit sends pod through the webhook over HTTP and returns the response
// and the pod with the patch applied.
func admit(t *testing.T, url string, pod *corev1.Pod) (*admissionv1.AdmissionResponse, *corev1.Pod) {
	t.Helper()
	return admitRequest(t, url, pod, nil)
}

type admissionRequest = admissionv1.AdmissionRequest

// admitRequest is admit with the request changed by edit first.
func admitRequest(t *testing.T, url string, pod *corev1.Pod, edit func(*admissionRequest)) (*admissionv1.AdmissionResponse, *corev1.Pod) {
	t.Helper()
	raw, _ := json.Marshal(pod)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: pod.Namespace,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	}
	if edit != nil {
		edit(review.Request)
	}
	body, _ := json.Marshal(review)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil || out.Response.UID != "u-1" {
		t.Fatalf("response %+v: %v", out, err)
	}
	got := pod.DeepCopy()
	if out.Response.Patch != nil {
		if *out.Response.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %s", *out.Response.PatchType)
		}
		p, err := jsonpatch.DecodePatch(out.Response.Patch)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := p.Apply(raw)
		if err != nil {
			t.Fatalf("apply %s: %v", out.Response.Patch, err)
		}
		got = &corev1.Pod{}
		if err := json.Unmarshal(patched, got); err != nil {
			t.Fatal(err)
		}
	}
	return out.Response, got
}

// TestWebhook: a Pod's init, regular and ephemeral container images are
// rewritten by digest and the pull secret added; admitting the result again
// changes nothing; ignored namespaces are left alone; unknown images are
// refused under the policy; a broken state fails closed.
func TestWebhook(t *testing.T) {
	var failState bool
	strict := false
	wh := &Webhook{
		Rewriter: func(context.Context) (*Rewriter, error) {
			if failState {
				return nil, errors.New("cannot read deployed packages")
			}
			return testRewriter(t, strict), nil
		},
		PullSecret: "ferry-registry-pull",
		Ignore:     func(ns string) bool { return ns == "ferry" || ns == "kube-system" },
	}
	srv := httptest.NewServer(wh)
	defer srv.Close()

	resp, pod := admit(t, srv.URL, testPod())
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	app := host + "/library/app@" + appDigest.String()
	if pod.Spec.InitContainers[0].Image != host+"/org/tool@"+toolDigest.String() ||
		pod.Spec.Containers[0].Image != app || pod.Spec.Containers[1].Image != "quay.io/other/thing:1" ||
		pod.Spec.EphemeralContainers[0].Image != app {
		t.Fatalf("images after the patch: %+v", pod.Spec)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "ferry-registry-pull" {
		t.Fatalf("pull secrets %v", pod.Spec.ImagePullSecrets)
	}
	if again, _ := admit(t, srv.URL, pod); !again.Allowed || again.Patch != nil {
		t.Fatalf("admitting a rewritten pod patched it again: %s", again.Patch)
	}

	withSecret := testPod()
	withSecret.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "mine"}}
	if _, p := admit(t, srv.URL, withSecret); len(p.Spec.ImagePullSecrets) != 2 {
		t.Fatalf("pull secrets %v, want mine and ferry's", p.Spec.ImagePullSecrets)
	}

	ignored := testPod()
	ignored.Namespace = "ferry"
	if r, _ := admit(t, srv.URL, ignored); !r.Allowed || r.Patch != nil {
		t.Fatalf("a pod in an ignored namespace was patched: %s", r.Patch)
	}

	strict = true
	if r, _ := admit(t, srv.URL, testPod()); r.Allowed || r.Result.Code != http.StatusForbidden {
		t.Fatalf("policy: unknown image admitted: %+v", r)
	}
	strict, failState = false, true
	if r, _ := admit(t, srv.URL, testPod()); r.Allowed {
		t.Fatal("admitted while the deployed images could not be read")
	}
}
