package chartrender_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// pinned are the images each third-party chart's default rendering uses
// (test hooks apart), as its release publishes them.
var pinned = map[string]struct{ images, test []string }{
	"kyverno@v1.13.4": {
		images: []string{
			"docker.io/bitnami/kubectl:1.30.2",
			"ghcr.io/kyverno/background-controller:v1.13.4",
			"ghcr.io/kyverno/cleanup-controller:v1.13.4",
			"ghcr.io/kyverno/kyverno-cli:v1.13.4",
			"ghcr.io/kyverno/kyverno:v1.13.4",
			"ghcr.io/kyverno/kyvernopre:v1.13.4",
			"ghcr.io/kyverno/reports-controller:v1.13.4",
		},
		test: []string{"docker.io/library/busybox:1.35"},
	},
	"gatekeeper@v3.23.1": {
		images: []string{
			"docker.io/curlimages/curl:8.20.0",
			"docker.io/openpolicyagent/gatekeeper-crds:v3.23.1",
			"docker.io/openpolicyagent/gatekeeper:v3.23.1",
		},
	},
	"metallb@v0.16.2": {
		images: []string{
			"quay.io/frrouting/frr:10.6.2",
			"quay.io/metallb/controller:v0.16.2",
			"quay.io/metallb/frr-k8s:v0.0.27",
			"quay.io/metallb/speaker:v0.16.2",
		},
	},
}

func TestDefaultKubeVersion(t *testing.T) {
	if build.DefaultKubeVersion != thirdparty.KubeVersion {
		t.Errorf("artifact.DefaultKubeVersion %s, the e2e cluster's %s", build.DefaultKubeVersion, thirdparty.KubeVersion)
	}
}

// TestFindImagesThirdParty: for real charts, FindImages finds exactly the
// images `helm template` output runs (found by a walk of its own), and the
// ones pinned for the chart's version.
func TestFindImagesThirdParty(t *testing.T) {
	helm := peertool.Require(t, "helm")
	for _, c := range thirdparty.Charts {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			c.Copy(t, dir)
			def := writeDef(t, dir, "    images:\n      - busybox:1.35\n      - nginx:1.27\n    charts:\n      - path: "+c.Name+"\n        namespace: "+c.Name+"\n")
			found, err := build.FindImages(context.Background(), def, build.FindImagesOptions{
				Charts: limited, Render: limited, Values: c.Values,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := found.Components[0]
			var images, test []string
			for _, i := range got.Images {
				if len(i.Where) == 0 || !strings.HasPrefix(i.Where[0], "chart "+c.Name+": ") {
					t.Errorf("%s: where %q", i.Ref, i.Where)
				}
				if i.Test {
					test = append(test, i.Ref)
				} else {
					images = append(images, i.Ref)
				}
			}
			wantImages, wantTest := helmTemplateImages(t, helm, dir, c)
			if !slices.Equal(images, wantImages) || !slices.Equal(test, wantTest) {
				t.Errorf("found %q, test hooks %q; helm template runs %q, test hooks %q", images, test, wantImages, wantTest)
			}
			pin := pinned[c.Name+"@"+c.Version]
			if !slices.Equal(images, pin.images) || !slices.Equal(test, pin.test) {
				t.Errorf("found %q, test hooks %q; pinned %q, %q", images, test, pin.images, pin.test)
			}
			// Nothing image-like outside image fields, no placeholder.
			if len(got.Maybe)+len(got.Placeholders) != 0 {
				t.Errorf("maybe %+v, placeholders %+v; want none", got.Maybe, got.Placeholders)
			}
			// The diff against the two images listed.
			if !slices.Equal(got.Missing, pin.images) {
				t.Errorf("missing %q, want %q", got.Missing, pin.images)
			}
			wantUnused, wantPresent, wantTestOnly := []string{"docker.io/library/busybox:1.35", "docker.io/library/nginx:1.27"}, []string{}, pin.test
			if len(pin.test) > 0 { // kyverno's test hooks run busybox:1.35
				wantUnused, wantPresent, wantTestOnly = []string{"docker.io/library/nginx:1.27"}, []string{"docker.io/library/busybox:1.35"}, []string{}
			}
			if !slices.Equal(got.Unused, wantUnused) || !slices.Equal(got.Present, wantPresent) || !slices.Equal(got.Test, emptyIfNil(wantTestOnly)) {
				t.Errorf("unused %q present %q test %q; want %q %q %q", got.Unused, got.Present, got.Test, wantUnused, wantPresent, wantTestOnly)
			}
		})
	}
}

// pinnedImageLike are, for each chart of thirdparty.ImageLike rendered with
// its defaults, its images, its maybe images with where each is, and its
// placeholders.
var pinnedImageLike = map[string]struct {
	images       []string
	maybe        map[string][]string
	placeholders []string
}{
	"cert-manager@v1.21.2": {
		images: []string{
			"quay.io/jetstack/cert-manager-cainjector:v0.0.0",
			"quay.io/jetstack/cert-manager-controller:v0.0.0",
			"quay.io/jetstack/cert-manager-startupapicheck:v0.0.0",
			"quay.io/jetstack/cert-manager-webhook:v0.0.0",
		},
		maybe: map[string][]string{
			"quay.io/jetstack/cert-manager-acmesolver:v0.0.0": {"chart cert-manager: Deployment cert-manager: container cert-manager-controller args"},
		},
	},
	"istiod@v0.0.0-20260423205519-b01690e6db7d": {
		images: []string{"registry.istio.io/testing/pilot:latest"},
		maybe: map[string][]string{
			"docker.io/library/busybox:1.28": {"chart istiod: ConfigMap istio-sidecar-injector: data.config"},
			"registry.istio.io/testing/proxyv2:latest": {
				"chart istiod: ConfigMap istio-sidecar-injector: data.values",
				"chart istiod: ConfigMap values: data.merged-values",
			},
		},
	},
	"gateway@v0.0.0-20260423205519-b01690e6db7d": {
		placeholders: []string{"docker.io/library/auto:latest"},
	},
	"cilium@v1.20.2": {
		images: []string{
			"quay.io/cilium/cilium-envoy:v1.37.6-1789133542-cbec91f666af0bf742da986d43832932dbb26b82@sha256:af7382699576b9e65e9184efa52eeca0b58aea70ad6e511bf260c91d9f740463",
			"quay.io/cilium/cilium:v1.20.2",
			"quay.io/cilium/operator-generic:v1.20.2",
		},
	},
	"ingress-nginx@v0.0.0-20240708192948-52c50467d67d": {
		images: []string{
			"registry.k8s.io/ingress-nginx/controller:v1.11.0@sha256:a886e56d532d1388c77c8340261149d974370edca1093af4c97a96fb1467cb39",
			"registry.k8s.io/ingress-nginx/kube-webhook-certgen:v1.4.1@sha256:36d05b4077fb8e3d13663702fa337f124675ba8667cbd949c03a8e8ea6fa4366",
		},
	},
	"external-dns@v0.22.0": {
		images: []string{"registry.k8s.io/external-dns/external-dns:v0.21.0"},
	},
}

// TestFindImagesImageLike: for real charts that pass images outside
// image fields or write placeholders, FindImages finds the images `helm
// template` output runs but the placeholders, reports the placeholders
// and the maybe images apart, and adds neither to Missing; a maybe image
// listed is present, among the images marked maybe.
func TestFindImagesImageLike(t *testing.T) {
	helm := peertool.Require(t, "helm")
	for _, c := range thirdparty.ImageLike {
		t.Run(c.Name, func(t *testing.T) {
			pin, ok := pinnedImageLike[c.Name+"@"+c.Version]
			if !ok {
				t.Fatalf("nothing pinned for %s@%s", c.Name, c.Version)
			}
			var listed []string
			for ref := range pin.maybe {
				listed = append(listed, ref)
			}
			sort.Strings(listed)
			dir := t.TempDir()
			c.Copy(t, dir)
			body := "    charts:\n      - path: " + c.Name + "\n        namespace: " + c.Name + "\n"
			for _, list := range [][]string{nil, listed[:min(1, len(listed))]} {
				images := body
				if len(list) > 0 {
					images = "    images:\n      - " + list[0] + "\n" + body
				}
				found, err := build.FindImages(context.Background(), writeDef(t, dir, images), build.FindImagesOptions{Charts: limited, Render: limited, Values: c.Values})
				if err != nil {
					t.Fatal(err)
				}
				got := found.Components[0]
				var sure []string
				maybe := map[string][]string{}
				for _, i := range got.Images {
					if i.Maybe {
						maybe[i.Ref] = i.Where
					} else {
						sure = append(sure, i.Ref)
					}
				}
				for _, m := range got.Maybe {
					maybe[m.Ref] = m.Where
				}
				var placeholders []string
				for _, p := range got.Placeholders {
					placeholders = append(placeholders, p.Ref)
					if p.Why == "" || len(p.Where) == 0 || !strings.HasPrefix(p.Where[0], "chart "+c.Name+": ") {
						t.Errorf("placeholder %+v", p)
					}
				}
				if len(list) > 0 && !slices.Equal(got.Present, list) {
					t.Errorf("listed %q: present %q", list, got.Present)
				}
				if !slices.Equal(sure, pin.images) || !slices.Equal(got.Missing, emptyIfNil(pin.images)) ||
					!maps.EqualFunc(maybe, pin.maybe, slices.Equal) || len(got.Maybe) != len(pin.maybe)-len(list) || !slices.Equal(placeholders, pin.placeholders) {
					t.Errorf("images %q missing %q maybe %q (%d unlisted) placeholders %q; pinned %q %q %q", sure, got.Missing, maybe, len(got.Maybe), placeholders, pin.images, pin.maybe, pin.placeholders)
				}
			}
			// Helm's own rendering runs the same images, and the placeholders.
			wantImages, _ := helmTemplateImages(t, helm, dir, c)
			if all := slices.Sorted(slices.Values(slices.Concat(pin.images, pin.placeholders))); !slices.Equal(all, wantImages) {
				t.Errorf("helm template runs %q; pinned images and placeholders %q", wantImages, all)
			}
		})
	}
}

// repeatable are values that make a chart render the same each time, for
// the charts that make keys or certificates as they render.
var repeatable = map[string]map[string]any{
	// Hubble's TLS certificates, made by genCA and genSignedCert.
	"cilium": {"hubble": map[string]any{"tls": map[string]any{"enabled": false}}},
}

// TestRenderThirdPartyBytes: for real charts, what the bounded child
// renders is byte for byte what Helm's SDK renders in this process, and
// what `helm template` prints.
func TestRenderThirdPartyBytes(t *testing.T) {
	ctx := context.Background()
	for _, c := range slices.Concat(thirdparty.Charts, thirdparty.ImageLike) {
		if v := repeatable[c.Name]; v != nil {
			c.Values = maps.Clone(c.Values)
			if c.Values == nil {
				c.Values = map[string]any{}
			}
			maps.Copy(c.Values, v)
		}
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			c.Copy(t, dir)
			archive, _, err := limited.PackageChart(ctx, os.DirFS(dir), c.Name, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			inProcess, _, err := chart.Packager{}.PackageChart(ctx, os.DirFS(dir), c.Name, time.Unix(0, 0))
			if err != nil || !bytes.Equal(archive, inProcess) {
				t.Fatalf("packaged in the child: %d bytes, in this process: %d bytes, %v", len(archive), len(inProcess), err)
			}
			rel := build.ChartRelease{Name: c.Name, Namespace: c.Name, Values: c.Values}
			got, err := limited.RenderChart(ctx, archive, rel)
			if err != nil {
				t.Fatal(err)
			}
			want, err := chartrender.Renderer{}.RenderChart(ctx, archive, rel)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the child rendered %d manifests, this process %d, not the same", len(got), len(want))
			}
			helm := peertool.Require(t, "helm")
			if out := helmTemplate(t, helm, dir, c); templateOutput(got) != string(out) {
				t.Errorf("the child's rendering (%d bytes) is not helm template's (%d bytes)", len(templateOutput(got)), len(out))
			}
		})
	}
}

// templateOutput is what `helm template` prints of a rendering: the
// release's manifest, then each hook after a document separator.
func templateOutput(m []build.RenderedManifest) string {
	out := strings.TrimSpace(string(m[0].Data)) + "\n"
	for _, h := range m[1:] {
		out += "---\n" + string(h.Data)
	}
	return out
}

func emptyIfNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeDef writes a definition of one component c whose body follows, and
// parses it.
func writeDef(t *testing.T, dir, body string) *definition.Definition {
	t.Helper()
	data := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: fi\n  version: 1.0.0\ncomponents:\n  - name: c\n" + body
	p := filepath.Join(dir, "ferry.yaml")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	def, err := definition.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// helmTemplateImages runs the real `helm template` on the chart copied in
// dir and returns the images its containers run, sorted and normalized,
// those of test hooks (used nowhere else) apart: a walk of its own, every
// `containers`, `initContainers` and `ephemeralContainers` list of every
// object but CRDs.
func helmTemplateImages(t *testing.T, helm, dir string, c thirdparty.Chart) (images, test []string) {
	t.Helper()
	out := helmTemplate(t, helm, dir, c)
	normal, tests := map[string]bool{}, map[string]bool{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		if obj == nil || obj["kind"] == "CustomResourceDefinition" {
			continue
		}
		md, _ := obj["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		into := normal
		if ann["helm.sh/hook"] == "test" {
			into = tests
		}
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
						list, _ := e.([]any)
						for _, ctr := range list {
							if s, _ := ctr.(map[string]any)["image"].(string); s != "" {
								named, err := reference.ParseNormalizedNamed(s)
								if err != nil {
									t.Fatalf("helm template output: image %q: %v", s, err)
								}
								into[reference.TagNameOnly(named).String()] = true
							}
						}
					}
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(obj)
	}
	for i := range normal {
		images = append(images, i)
		delete(tests, i)
	}
	for i := range tests {
		test = append(test, i)
	}
	sort.Strings(images)
	sort.Strings(test)
	return images, test
}

// helmTemplate runs the real `helm template` on the chart copied in dir,
// as deploy would install it, and returns what it prints.
func helmTemplate(t *testing.T, helm, dir string, c thirdparty.Chart) []byte {
	t.Helper()
	args := []string{"template", c.Name, filepath.Join(dir, c.Name), "--kube-version", thirdparty.KubeVersion, "--include-crds", "-n", c.Name}
	if c.Values != nil {
		data, err := yaml.Marshal(c.Values)
		if err != nil {
			t.Fatal(err)
		}
		vf := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(vf, data, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", vf)
	}
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return out
}
