package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

const findDef = `# shipped to the plant
apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: fi
  version: 0.1.0
components:
  # the web tier
  - name: web
    images:
      - nginx:1.27 # the front
      - old/thing:1
    charts:
      - path: charts/app
        namespace: web
    manifests:
      - name: extra
        files: [extra.yaml]
`

// TestCLIFindImages: find-images lists what is missing, unused, present
// and used by test hooks only, as text and JSON; --check fails while an
// image is missing; --write adds it, comments kept.
func TestCLIFindImages(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), findDef)
	if _, err := fixture.Chart(filepath.Join(dir, "charts"), "app", "0.1.0", "ghcr.io/example/app:2.0"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "charts", "app", "templates", "tests", "ping.yaml"), "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ping\n  annotations: {helm.sh/hook: test}\nspec: {containers: [{name: p, image: busybox:1.35}]}\n")
	writeFile(t, filepath.Join(dir, "extra.yaml"), "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec: {template: {spec: {containers: [{name: a, image: nginx:1.27}, {name: b, image: 'quay.io/example/agent:3'}]}}}\n")

	out, stderr, code := runFerry(t, dir, "package", "find-images")
	if code != 0 || stderr != "" {
		t.Fatalf("find-images: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"component web\n",
		"missing    ghcr.io/example/app:2.0         chart app: Deployment app\n",
		"missing    quay.io/example/agent:3         manifests extra: DaemonSet agent\n",
		"unused     docker.io/old/thing:1\n",
		"present    docker.io/library/nginx:1.27    manifests extra: DaemonSet agent\n",
		"test only  docker.io/library/busybox:1.35  chart app: Pod ping\n",
		"2 images missing (components web); --write adds them to ferry.yaml\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("find-images printed\n%s\nwithout %q", out, want)
		}
	}

	out, stderr, code = runFerry(t, dir, "package", "find-images", ".", "--check", "-o", "json")
	if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "ferry.yaml lacks 2 images") {
		t.Fatalf("--check: exit %d, stderr %q", code, stderr)
	}
	var res struct {
		Components []struct {
			Name                           string
			Missing, Unused, Present, Test []string
			Images                         []struct {
				Ref   string
				Test  bool
				Where []string
			}
		}
		Missing int
		Written bool
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if len(res.Components) != 1 || res.Missing != 2 || res.Written || len(res.Components[0].Images) != 4 ||
		!slices.Equal(res.Components[0].Missing, []string{"ghcr.io/example/app:2.0", "quay.io/example/agent:3"}) ||
		!slices.Equal(res.Components[0].Test, []string{"docker.io/library/busybox:1.35"}) {
		t.Errorf("-o json: %+v", res)
	}

	// --set reaches the chart as deploy's does.
	out, _, code = runFerry(t, dir, "package", "find-images", "--set", "image=ghcr.io/example/app:2.1")
	if code != 0 || !strings.Contains(out, "missing    ghcr.io/example/app:2.1") {
		t.Errorf("--set: exit %d\n%s", code, out)
	}

	out, stderr, code = runFerry(t, dir, "package", "find-images", "--write", "--check")
	if code != 0 || !strings.Contains(out, "added 2 images to ferry.yaml\n") {
		t.Fatalf("--write: exit %d: %s %s", code, out, stderr)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "ferry.yaml"))
	want := strings.Replace(findDef, "      - old/thing:1\n", "      - old/thing:1\n      - ghcr.io/example/app:2.0\n      - quay.io/example/agent:3\n", 1)
	if string(data) != want {
		t.Errorf("--write wrote\n%s\nwant\n%s", data, want)
	}
	out, _, code = runFerry(t, dir, "package", "find-images", "--check")
	if code != 0 || !strings.Contains(out, "no image missing from ferry.yaml") {
		t.Errorf("after --write, --check: exit %d\n%s", code, out)
	}

	// A chart that does not render: one line naming it, exit 1.
	writeFile(t, filepath.Join(dir, "charts", "app", "templates", "broken.yaml"), "{{ required \"set db.host\" .Values.db }}\n")
	out, stderr, code = runFerry(t, dir, "package", "find-images")
	if code != 1 || out != "" || strings.Count(stderr, "\n") != 1 ||
		!strings.HasPrefix(stderr, "ferry: ferry.yaml:16: components[0].charts[0]: chart charts/app: render: ") || !strings.Contains(stderr, "set db.host") {
		t.Errorf("broken chart: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestCLIFindImagesMaybe: image-like strings outside image fields are
// listed as maybe and placeholders as not carried; neither counts for
// --check nor is added by --write; --write-maybe adds the maybe ones,
// which are then present.
func TestCLIFindImagesMaybe(t *testing.T) {
	dir := t.TempDir()
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: fm, version: 0.1.0}\ncomponents:\n  - name: ctl\n    images:\n      - ghcr.io/example/ctl:1\n    manifests: [{name: m, files: [m.yaml]}]\n"
	writeFile(t, filepath.Join(dir, "ferry.yaml"), def)
	writeFile(t, filepath.Join(dir, "m.yaml"), `apiVersion: apps/v1
kind: Deployment
metadata: {name: ctl}
spec: {template: {spec: {containers: [{name: ctl, image: ghcr.io/example/ctl:1, args: [--solver-image=quay.io/example/solver:1, --level=default:info], env: [{name: HELPER, value: ghcr.io/example/helper:2}]}]}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gw}
spec: {template: {spec: {containers: [{name: istio-proxy, image: auto}]}}}
`)
	out, stderr, code := runFerry(t, dir, "package", "find-images", "--check")
	want := `component ctl
  present      ghcr.io/example/ctl:1          manifests m: Deployment ctl
  maybe        ghcr.io/example/helper:2       manifests m: Deployment ctl: container ctl env HELPER
  maybe        quay.io/example/solver:1       manifests m: Deployment ctl: container ctl args
  placeholder  docker.io/library/auto:latest  manifests m: Deployment gw; not carried: Istio's injector replaces it with its proxy image when the Pod is created
no image missing from ferry.yaml
2 maybe images not added; --write-maybe adds them, or list those to carry in ferry.yaml
`
	if code != 0 || stderr != "" || out != want {
		t.Fatalf("find-images --check: exit %d %s\n%s\nwant\n%s", code, stderr, out, want)
	}

	out, _, code = runFerry(t, dir, "package", "find-images", "-o", "json")
	var res struct {
		Components []struct {
			Maybe []struct {
				Ref   string
				Where []string
			}
			Placeholders []struct{ Ref, Why string }
			Missing      []string
		}
		Missing, Maybe int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("-o json: exit %d, %v\n%s", code, err, out)
	}
	if c := res.Components[0]; res.Missing != 0 || res.Maybe != 2 || len(c.Missing) != 0 || len(c.Maybe) != 2 ||
		c.Maybe[1].Ref != "quay.io/example/solver:1" || len(c.Placeholders) != 1 || c.Placeholders[0].Ref != "docker.io/library/auto:latest" {
		t.Errorf("-o json: %+v", res)
	}

	out, _, code = runFerry(t, dir, "package", "find-images", "--write")
	if data, _ := os.ReadFile(filepath.Join(dir, "ferry.yaml")); code != 0 || string(data) != def || !strings.Contains(out, "2 maybe images not added") {
		t.Errorf("--write: exit %d, wrote\n%s\n%s", code, data, out)
	}
	out, _, code = runFerry(t, dir, "package", "find-images", "--write-maybe")
	data, _ := os.ReadFile(filepath.Join(dir, "ferry.yaml"))
	if wantDef := strings.Replace(def, "ctl:1\n", "ctl:1\n      - ghcr.io/example/helper:2\n      - quay.io/example/solver:1\n", 1); code != 0 || string(data) != wantDef || !strings.Contains(out, "added 2 maybe images to ferry.yaml\n") {
		t.Errorf("--write-maybe: exit %d, wrote\n%s\nwant\n%s\n%s", code, data, wantDef, out)
	}
	out, _, _ = runFerry(t, dir, "package", "find-images")
	if !strings.Contains(out, "  present      quay.io/example/solver:1       manifests m: Deployment ctl: container ctl args\n") || strings.Contains(out, "maybe") {
		t.Errorf("after --write-maybe:\n%s", out)
	}
}

// TestCLICreateFindImages: with `findImages: true`, create carries the
// images the component's manifests run and says so.
func TestCLICreateFindImages(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	host := registrytest.New(t)
	store, err := oci.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := fixture.PushImage(ctx, store, fixture.Platform("linux", runtime.GOARCH, ""), []fixture.Layer{fixture.NewLayer(fixture.Rand(7), 4<<10)})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := remote.NewRepository(host + "/team/app:1.0")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	if err := store.Tag(ctx, m, "1.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.Copy(ctx, store, "1.0", repo, "1.0", oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	image := host + "/team/app:1.0"
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: cf, version: 0.1.0}\nplatforms: [linux/"+runtime.GOARCH+"]\ncomponents:\n  - name: app\n    findImages: true\n    manifests: [{name: m, files: [m.yaml]}]\n")
	writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: '"+image+"', args: [--helper=ghcr.io/example/helper:2]}]}\n")
	out, stderr, code := runFerry(t, dir, "package", "create", "-f", "cf.tar", "--sbom=false")
	if code != 0 || !strings.Contains(out, "found image "+image+" (component app, findImages)\n") ||
		!strings.Contains(out, "maybe image ghcr.io/example/helper:2 (component app, findImages): not carried unless listed in images\n") {
		t.Fatalf("create: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runFerry(t, dir, "package", "inspect", "cf.tar")
	if code != 0 || !strings.Contains(out, image) || !strings.Contains(out, m.Digest.String()) {
		t.Errorf("inspect: exit %d\n%s", code, out)
	}
}
