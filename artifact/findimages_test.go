package artifact_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

func findImages(t *testing.T, dir string, opts build.FindImagesOptions) (*build.FoundImages, error) {
	t.Helper()
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return build.FindImages(context.Background(), def, opts)
}

func checkList(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
}

const findManifests = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      initContainers: [{name: init, image: "busybox:1.36"}]
      containers: [{name: web, image: nginx:1.27}, {name: side, image: "ghcr.io/a/b@sha256:` + hex64 + `"}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec: {jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: "registry.example:5000/tools/backup:2"}]}}}}}
---
apiVersion: v1
kind: Pod
metadata: {name: debug, annotations: {image: "not/reported:1"}}
spec: {containers: [{name: c, image: "nginx:1.27"}], ephemeralContainers: [{name: e, image: "docker.io/library/alpine"}]}
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: main}
spec:
  image: quay.io/prometheus/prometheus:v3.0.0
  mode: enabled
  sidecars: [{image: enabled}, {nested: {image: "quay.io/thanos/thanos:v0.36"}}]
---
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Pod, metadata: {name: listed}, spec: {containers: [{name: c, image: "quay.io/listed/pod:1"}]}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  versions:
    - name: v1
      schema: {openAPIV3Schema: {properties: {image: {type: string, default: "schema/default:1"}, example: {image: "schema/example:1"}}}}
`

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestFindImagesManifests: the images of every kind of workload, of custom
// resources, of List items; none from metadata, CRD schemas or bare words;
// listed images matched in any spelling, by tag or digest.
func TestFindImagesManifests(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "m", "all.yaml"), findManifests)
	writeFile(t, filepath.Join(dir, "ferry.yaml"), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: m, version: "1"}
components:
  - name: c
    images:
      - nginx:1.27
      - ghcr.io/a/b:1.0@sha256:`+hex64+`
      - quay.io/prometheus/prometheus:v2.0.0
    manifests:
      - name: all
        files: [m]
`)
	found, err := findImages(t, dir, build.FindImagesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := found.Components[0]
	var refs []string
	for _, i := range c.Images {
		refs = append(refs, i.Ref)
		if i.Test || len(i.Where) == 0 {
			t.Errorf("%+v", i)
		}
	}
	checkList(t, "found", refs,
		"docker.io/library/alpine:latest", "docker.io/library/busybox:1.36", "docker.io/library/nginx:1.27",
		"ghcr.io/a/b@sha256:"+hex64, "quay.io/listed/pod:1", "quay.io/prometheus/prometheus:v3.0.0",
		"quay.io/thanos/thanos:v0.36", "registry.example:5000/tools/backup:2")
	checkList(t, "missing", c.Missing,
		"docker.io/library/alpine:latest", "docker.io/library/busybox:1.36",
		"quay.io/listed/pod:1", "quay.io/prometheus/prometheus:v3.0.0",
		"quay.io/thanos/thanos:v0.36", "registry.example:5000/tools/backup:2")
	checkList(t, "present", c.Present, "docker.io/library/nginx:1.27", "ghcr.io/a/b:1.0@sha256:"+hex64)
	checkList(t, "unused", c.Unused, "quay.io/prometheus/prometheus:v2.0.0")
	nginx := c.Images[slices.IndexFunc(c.Images, func(i build.FoundImage) bool { return i.Ref == "docker.io/library/nginx:1.27" })]
	checkList(t, "nginx used by", nginx.Where, "manifests all: Deployment web", "manifests all: Pod debug")
}

// TestFindImagesHostile: what cannot be read is one line that names the
// file or the chart, and the definition's line (package
// artifact/chartrender's tests have charts that do not render).
func TestFindImagesHostile(t *testing.T) {
	tests := []struct {
		name, files, def string
		opts             build.FindImagesOptions
		want             []string
	}{
		{
			name:  "bad image in a workload",
			files: "m/bad.yaml=apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: 'Not A/Ref'}]}\n",
			def:   "    manifests: [{name: bad, files: [m/bad.yaml]}]\n",
			want:  []string{"ferry.yaml:7: components[0].manifests[0]: ", "m/bad.yaml: Pod p: containers[0]: invalid image reference"},
		},
		{
			name:  "garbage YAML",
			files: "m/g.yaml=apiVersion: v1\nkind: [unclosed\n",
			def:   "    manifests: [{name: g, files: [m/g.yaml]}]\n",
			want:  []string{"components[0].manifests[0]: m/g.yaml: invalid YAML"},
		},
		{
			name:  "no renderer",
			files: "charts/app/Chart.yaml=apiVersion: v2\nname: app\nversion: 1.0.0\n",
			def:   "    charts: [{path: charts/app}]\n",
			want:  []string{"chart renderer"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range strings.Split(tt.files, ";") {
				name, body, _ := strings.Cut(f, "=")
				writeFile(t, filepath.Join(dir, name), body)
			}
			writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: h, version: '1'}\ncomponents:\n  - name: c\n    images: [nginx:1.27]\n"+tt.def)
			_, err := findImages(t, dir, tt.opts)
			var de *definition.Error
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T), want a *DefinitionError", err, err)
			}
			msg := err.Error()
			t.Log(msg)
			if strings.Contains(msg, "\n") {
				t.Errorf("multi-line error %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// TestCreateFindImagesNeedsRenderer: create refuses a component with
// `findImages: true` and charts when it has no chart renderer (package
// artifact/chartrender's tests run it with one).
func TestCreateFindImagesNeedsRenderer(t *testing.T) {
	dir := t.TempDir()
	if _, err := fixture.Chart(filepath.Join(dir, "charts"), "app", "0.1.0", "nginx:1.27"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: f, version: '1'}\ncomponents:\n  - name: app\n    findImages: true\n    charts: [{path: charts/app}]\n")
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(t.TempDir(), "p.tar")})
	if err == nil || !strings.Contains(err.Error(), "ferry.yaml:7: components[0].charts[0]: chart charts/app: finding its images needs a chart renderer") {
		t.Fatalf("create without a renderer: %v", err)
	}
}

// ExampleFindImages compares the images a component's manifests run with
// those it lists. (Charts need a renderer: package artifact/chartrender.)
func ExampleFindImages() {
	dir, err := os.MkdirTemp("", "ferry-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"ferry.yaml": "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: web, version: 1.0.0}\ncomponents:\n  - name: web\n    images: [nginx:1.27, redis:7]\n    manifests: [{name: web, files: [web.yaml]}]\n",
		"web.yaml":   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: web, image: nginx:1.27}, {name: log, image: fluent/fluent-bit:3.2}]}}}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	def, err := definition.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	found, err := build.FindImages(context.Background(), def, build.FindImagesOptions{})
	if err != nil {
		log.Fatal(err)
	}
	c := found.Components[0]
	fmt.Println("missing:", c.Missing)
	fmt.Println("unused:", c.Unused)
	fmt.Println("present:", c.Present)
	// Output:
	// missing: [docker.io/fluent/fluent-bit:3.2]
	// unused: [docker.io/library/redis:7]
	// present: [docker.io/library/nginx:1.27]
}
