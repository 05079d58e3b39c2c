package build

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestImageLike(t *testing.T) {
	const digest = "sha256:81398e449f2d3d0a6a70527e4f641aaa685d3156bea0bb30712fae3fd8822b86"
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"--acme-http01-solver-image=quay.io/jetstack/cert-manager-acmesolver:v1.21.2", []string{"quay.io/jetstack/cert-manager-acmesolver:v1.21.2"}},
		{"ghcr.io/org/app@" + digest, []string{"ghcr.io/org/app@" + digest}},
		{"use bitnami/kubectl:1.30, then registry.k8s.io/pause:3.10.", []string{"docker.io/bitnami/kubectl:1.30", "registry.k8s.io/pause:3.10"}},
		{"initContainers:\n  - name: init\n    image: busybox:1.28\n", []string{"docker.io/library/busybox:1.28"}},
		{`{"image": "nginx:1.27", "other": "redis:7"}`, []string{"docker.io/library/nginx:1.27"}},
		{"image: 'quay.io/a/b'", []string{"quay.io/a/b:latest"}},
		// Not images: a URL, a bare name with a tag, no tag, capitals, a
		// path, a word after image: without a registry, path, tag or
		// digest, a template, a placeholder, an over-long word.
		{"https://example.com/a/b:1 http://x/y", nil},
		{"level default:info redis:7 localhost:8080", nil},
		{"ghcr.io/org/app kubernetes.io/hostname", nil},
		{"Org/App:1 /var/run/x:1 ./a/b:c", nil},
		{"image: proxyv2\nimage: auto\nimage: \"{{ .ProxyImage }}\"", nil},
		{"docker.io/library/auto:latest", nil},
		{"ghcr.io/" + strings.Repeat("a", 600) + ":1", nil},
	} {
		s := newScan()
		s.imageLike(tc.text, "here")
		if got := slices.Sorted(maps.Keys(s.maybe)); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestHubImages(t *testing.T) {
	s := newScan()
	values := `{"global": {"hub": "docker.io/istio", "tag": "1.28.0", "proxy": {"image": "proxyv2"}, "proxy_init": {"image": "proxyv2"},
		"waypoint": {"hub": "gcr.io/x", "image": "waypoint"}, "full": {"image": "quay.io/a/b:1"}}, "hub": "", "image": "pilot", "tag": 5}`
	obj := map[string]any{"kind": "ConfigMap", "data": map[string]any{"values": values, "other": "{not json"}}
	s.maybeObject(obj, "ConfigMap", "chart istiod: ConfigMap x")
	want := map[string]string{
		"docker.io/istio/proxyv2:1.28.0": "chart istiod: ConfigMap x: data.values",
		"gcr.io/x/waypoint:1.28.0":       "chart istiod: ConfigMap x: data.values",
		"quay.io/a/b:1":                  "chart istiod: ConfigMap x: data.values", // as text
	}
	if len(s.maybe) != len(want) {
		t.Errorf("maybe %v, want %v", slices.Sorted(maps.Keys(s.maybe)), want)
	}
	for ref, where := range want {
		if u := s.maybe[ref]; u == nil || !slices.Equal(u.sorted(), []string{where}) {
			t.Errorf("%s: %v, want at %s", ref, u, where)
		}
	}
}

const maybeManifests = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ctl
  annotations: {sidecar.example.com/image: "ghcr.io/example/sidecar:1"}
spec:
  template:
    metadata:
      annotations: {note: "uses ghcr.io/example/tpl:2"}
    spec:
      containers:
        - name: ctl
          image: ghcr.io/example/ctl:1
          command: [/ctl, --self=ghcr.io/example/ctl:1]
          args: ["--solver-image=quay.io/example/solver:1", "--level=default:info"]
          env:
            - {name: HELPER_IMAGE, value: "quay.io/example/helper@sha256:81398e449f2d3d0a6a70527e4f641aaa685d3156bea0bb30712fae3fd8822b86"}
            - {name: FROM, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gw}
spec: {template: {spec: {containers: [{name: istio-proxy, image: auto}]}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: x, annotations: {a: "ghcr.io/example/crd:1"}}
---
apiVersion: example.com/v1
kind: Thing
metadata: {name: thing}
spec: {image: docker.io/library/auto, args: [ghcr.io/example/not-read:1]}
`

// TestScanMaybe: the maybe images of a set of manifests, the images and
// the placeholders apart, compared with a list.
func TestScanMaybe(t *testing.T) {
	s := newScan()
	if err := scanManifests(RenderedManifest{Source: "m.yaml", Data: []byte(maybeManifests)}, "manifests m", s); err != nil {
		t.Fatal(err)
	}
	hook := "apiVersion: v1\nkind: Pod\nmetadata: {name: t}\nspec: {containers: [{name: t, image: busybox:1.35, args: [ghcr.io/example/test-only:1]}]}\n"
	if err := scanManifests(RenderedManifest{Source: "t.yaml", Data: []byte(hook), Test: true}, "manifests m", s); err != nil {
		t.Fatal(err)
	}
	c := compareImages("c", []string{"quay.io/example/helper@sha256:81398e449f2d3d0a6a70527e4f641aaa685d3156bea0bb30712fae3fd8822b86"}, s)
	var maybe []string
	for _, m := range c.Maybe {
		maybe = append(maybe, m.Ref+" @ "+strings.Join(m.Where, "; "))
	}
	wantMaybe := []string{
		"ghcr.io/example/sidecar:1 @ manifests m: Deployment ctl: annotation sidecar.example.com/image",
		"ghcr.io/example/tpl:2 @ manifests m: Deployment ctl: annotation note",
		"quay.io/example/solver:1 @ manifests m: Deployment ctl: container ctl args",
	}
	if !slices.Equal(maybe, wantMaybe) {
		t.Errorf("maybe %q, want %q", maybe, wantMaybe)
	}
	checkStrings(t, "missing", c.Missing, "ghcr.io/example/ctl:1")
	checkStrings(t, "present", c.Present, "quay.io/example/helper@sha256:81398e449f2d3d0a6a70527e4f641aaa685d3156bea0bb30712fae3fd8822b86")
	checkStrings(t, "test", c.Test, "docker.io/library/busybox:1.35")
	if len(c.Placeholders) != 1 || c.Placeholders[0].Ref != "docker.io/library/auto:latest" || c.Placeholders[0].Why == "" ||
		!slices.Equal(c.Placeholders[0].Where, []string{"manifests m: Deployment gw", "manifests m: Thing thing"}) {
		t.Errorf("placeholders %+v", c.Placeholders)
	}
}

func checkStrings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s %q, want %q", what, got, want)
	}
}

// TestImageLikeLinear: text of any shape is read in one pass: 32 MiB of
// words that look almost like images, of distinct words that fail
// the parser late, of distinct images (the search stops past MaxMaybe, or past 4 MiB of words parsed), of one word with
// no break, and of breaks only, each in well under the time a quadratic
// scan would take.
func TestImageLikeLinear(t *testing.T) {
	const size = 32 << 20
	var distinct, failures strings.Builder
	for i := 0; distinct.Len() < size; i++ {
		fmt.Fprintf(&distinct, "ghcr.io/a/b:%d ", i)
	}
	for i := 0; failures.Len() < size; i++ {
		fmt.Fprintf(&failures, "%s%d:- ", strings.Repeat("a/", 120), i)
	}
	for name, text := range map[string]string{
		"near images":     strings.Repeat("ghcr.io/a/b:1 A/B:c x:y/z image: ", size/32),
		"late failures":   failures.String(),
		"distinct images": distinct.String(),
		"one word":        strings.Repeat("a/:@", size/4),
		"breaks":          strings.Repeat(" =,;\"'", size/6),
	} {
		s := newScan()
		start := time.Now()
		s.imageLike(text, "here")
		d := time.Since(start)
		t.Logf("%s: %d bytes in %v, %d maybe", name, len(text), d, len(s.maybe))
		if d > 30*time.Second {
			t.Errorf("%s: %d bytes read in %v", name, len(text), d)
		}
		if len(s.maybe) > MaxMaybe || s.maybeLimited != (name == "distinct images" || name == "late failures") {
			t.Errorf("%s: %d maybe images, limited %v", name, len(s.maybe), s.maybeLimited)
		}
	}
}

func BenchmarkImageLike(b *testing.B) {
	text := strings.Repeat("--flag=value ghcr.io/example/app:1.2.3 some words here default:info\n", 1<<14)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		newScan().imageLike(text, "here")
	}
}
