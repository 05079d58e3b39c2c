package agent

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ferrypkg/ferry/artifact"
)

// TestWebhookRefresh: a Pod naming an image the cached images do not know
// is decided on images read again (a package deployed a moment ago); a Pod
// whose images are all known does not cause a read.
func TestWebhookRefresh(t *testing.T) {
	src := &countingSource{}
	cache := &Cache{Source: src, Registry: host, MinInterval: -1}
	wh := &Webhook{Rewriter: cache.Rewriter, Refresh: cache.Refresh, PullSecret: "pull"}
	srv := httptest.NewServer(wh)
	defer srv.Close()

	pod := &corev1.Pod{ObjectMeta: testPod().ObjectMeta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1.0"}}}}
	if r, p := admit(t, srv.URL, pod); !r.Allowed || p.Spec.Containers[0].Image != "app:1.0" {
		t.Fatalf("unknown image: %+v, %s", r.Result, p.Spec.Containers[0].Image)
	}
	reads := src.reads.Load()
	src.add(&artifact.Config{Name: "demo", Components: []artifact.Component{{Images: []artifact.Image{{Ref: "docker.io/library/app:1.0", Digest: appDigest}}}}})
	_, p := admit(t, srv.URL, pod)
	if want := host + "/library/app@" + appDigest.String(); p.Spec.Containers[0].Image != want {
		t.Fatalf("after the deploy: %s, want %s", p.Spec.Containers[0].Image, want)
	}
	if src.reads.Load() != reads+1 {
		t.Fatalf("%d reads for the unknown image, want 1", src.reads.Load()-reads)
	}
	reads = src.reads.Load()
	admit(t, srv.URL, p)
	admit(t, srv.URL, pod)
	if src.reads.Load() != reads {
		t.Fatalf("known images caused %d reads", src.reads.Load()-reads)
	}
}

// TestWebhookEnsurePullSecret: the pull secret is made to exist in the
// Pod's namespace before a Pod that pulls from the registry is admitted —
// not on a dry run, not for other Pods — and a failure refuses the Pod.
func TestWebhookEnsurePullSecret(t *testing.T) {
	var ensured []string
	var fail error
	wh := &Webhook{
		Rewriter:   func(context.Context) (*Rewriter, error) { return testRewriter(t, false), nil },
		PullSecret: "pull",
		EnsurePullSecret: func(_ context.Context, ns string) error {
			ensured = append(ensured, ns)
			return fail
		},
	}
	srv := httptest.NewServer(wh)
	defer srv.Close()

	if r, _ := admit(t, srv.URL, testPod()); !r.Allowed || len(ensured) != 1 || ensured[0] != "apps" {
		t.Fatalf("allowed %v, ensured in %v", r.Allowed, ensured)
	}
	dry := true
	if r, _ := admitRequest(t, srv.URL, testPod(), func(r *admissionRequest) { r.DryRun = &dry }); !r.Allowed || len(ensured) != 1 {
		t.Fatalf("dry run: allowed %v, ensured in %v", r.Allowed, ensured)
	}
	other := testPod()
	other.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "quay.io/other/thing:1"}}}
	if r, _ := admit(t, srv.URL, other); !r.Allowed || r.Patch != nil || len(ensured) != 1 {
		t.Fatalf("a pod not using the registry: patch %s, ensured in %v", r.Patch, ensured)
	}
	fail = errors.New("forbidden")
	if r, _ := admit(t, srv.URL, testPod()); r.Allowed {
		t.Fatal("admitted although its pull secret could not be made")
	}
}
