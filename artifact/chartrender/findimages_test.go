package chartrender_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// limited is the renderer find-images and create use: charts loaded,
// packaged and rendered in a child (this test binary, see TestMain).
var limited = &chartrender.Limited{}

var opts = build.FindImagesOptions{Charts: limited, Render: limited}

func writeFile(t testing.TB, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func repository(t *testing.T, ref string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	return repo
}

// pushChart pushes a generated chart running image to repoRef:version as
// `helm push` does.
func pushChart(t *testing.T, repoRef, name, version, image string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	path, err := fixture.Chart(dir, name, version, image)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	tgzPath, err := chartutil.Save(ch, dir)
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := os.ReadFile(tgzPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(ch.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New()
	cdesc, _ := oras.PushBytes(ctx, mem, artifact.MediaTypeHelmConfig, cfg)
	ldesc, _ := oras.PushBytes(ctx, mem, artifact.MediaTypeHelmChart, tgz)
	mdesc, err := oras.PackManifest(ctx, mem, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{ConfigDescriptor: &cdesc, Layers: []ocispec.Descriptor{ldesc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.Tag(ctx, mdesc, version); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.Copy(ctx, mem, version, repository(t, repoRef+":"+version), version, oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
}

func load(t testing.TB, dir string) *definition.Definition {
	t.Helper()
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// TestFindImagesCharts: a chart folder and an oci:// chart (fetched from
// its registry) are rendered as deploy installs them — release name and
// namespace from the definition, --set values given to both.
func TestFindImagesCharts(t *testing.T) {
	host := registrytest.New(t)
	pushChart(t, host+"/charts/db", "db", "2.3.4", "docker.io/library/postgres:17")
	dir := t.TempDir()
	if _, err := fixture.Chart(filepath.Join(dir, "charts"), "app", "0.1.0", "web:1.0"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "charts", "app", "templates", "ns.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: where}\ndata: {ns: {{ .Release.Namespace }}}\n")
	writeFile(t, filepath.Join(dir, "ferry.yaml"), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: c, version: "1"}
components:
  - name: web
    images: [docker.io/library/web:1.0, unused:1]
    charts:
      - path: charts/app
        releaseName: front
        namespace: shop
      - url: oci://%s/charts/db
        version: 2.3.4
`, host))
	found, err := build.FindImages(context.Background(), load(t, dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	c := found.Components[0]
	if !slices.Equal(c.Missing, []string{"docker.io/library/postgres:17"}) || !slices.Equal(c.Present, []string{"docker.io/library/web:1.0"}) ||
		!slices.Equal(c.Unused, []string{"docker.io/library/unused:1"}) {
		t.Errorf("missing %q present %q unused %q", c.Missing, c.Present, c.Unused)
	}
	if len(c.Images) != 2 || !slices.Equal(c.Images[0].Where, []string{"chart db: Deployment db"}) || !slices.Equal(c.Images[1].Where, []string{"chart app: Deployment front"}) {
		t.Errorf("images %+v", c.Images)
	}

	withSet := opts
	withSet.Values = map[string]any{"image": "nginx:1.27"}
	found, err = build.FindImages(context.Background(), load(t, dir), withSet)
	if err != nil {
		t.Fatal(err)
	}
	if c := found.Components[0]; len(c.Images) != 1 || c.Images[0].Ref != "docker.io/library/nginx:1.27" || len(c.Images[0].Where) != 2 {
		t.Errorf("with --set: %+v", c.Images)
	}

	// The namespace reaches the templates.
	rendered, err := chartrender.Renderer{}.RenderChart(context.Background(), packaged(t, filepath.Join(dir, "charts", "app")), build.ChartRelease{Name: "front", Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rendered[0].Data), "ns: shop") {
		t.Errorf("rendered:\n%s", rendered[0].Data)
	}
}

func packaged(t *testing.T, dir string) []byte {
	t.Helper()
	tgz, _, err := chart.Packager{}.PackageChart(context.Background(), os.DirFS(filepath.Dir(dir)), filepath.Base(dir), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return tgz
}

// TestFindImagesChartHostile: a chart that does not load or render is one
// line naming the chart (and the template), at the definition's line.
func TestFindImagesChartHostile(t *testing.T) {
	tests := []struct {
		name, template string
		want           []string
	}{
		{"template fails", `{{ fail "the chart says no" }}`, []string{"chart charts/c: render: ", "the chart says no"}},
		{"template renders garbage", "kind: Pod\n  spec: [\n", []string{"chart charts/c: render: ", "c/templates/x.yaml"}},
		{"no Chart.yaml", "", []string{"chart charts/c: load: "}},
		{"bad kube version", "{{ .Capabilities.KubeVersion }}", []string{`kubernetes version "not-a-version"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.template != "" {
				writeFile(t, filepath.Join(dir, "charts", "c", "Chart.yaml"), "apiVersion: v2\nname: c\nversion: 1.0.0\n")
				writeFile(t, filepath.Join(dir, "charts", "c", "templates", "x.yaml"), tt.template)
			} else {
				writeFile(t, filepath.Join(dir, "charts", "c", "values.yaml"), "a: 1\n")
			}
			writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: h, version: '1'}\ncomponents:\n  - name: c\n    charts:\n      - path: charts/c\n")
			o := opts
			if tt.name == "bad kube version" {
				o.KubeVersion = "not-a-version"
			}
			_, err := build.FindImages(context.Background(), load(t, dir), o)
			var de *definition.Error
			if !errors.As(err, &de) || de.Line != 7 {
				t.Fatalf("error %v, want a *DefinitionError at line 7", err)
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

// TestCreateFindImages: `findImages: true` makes create carry the images
// the component's chart runs, resolved from their registry like listed
// ones, and report them.
func TestCreateFindImages(t *testing.T) {
	ctx := context.Background()
	host := registrytest.New(t)
	mem := memory.New()
	amd := fixture.Platform("linux", "amd64", "")
	m, err := fixture.PushImage(ctx, mem, amd, []fixture.Layer{fixture.NewLayer(fixture.Rand(1), 4<<10)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"web:1.0", "worker:2.0"} {
		if err := mem.Tag(ctx, m, tag); err != nil {
			t.Fatal(err)
		}
		if _, err := oras.Copy(ctx, mem, tag, repository(t, host+"/team/"+tag), tag[strings.Index(tag, ":")+1:], oras.DefaultCopyOptions); err != nil {
			t.Fatal(err)
		}
	}
	web, worker := host+"/team/web:1.0", host+"/team/worker:2.0"
	dir := t.TempDir()
	if _, err := fixture.Chart(filepath.Join(dir, "charts"), "app", "0.1.0", web); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: found, version: "1"}
platforms: [linux/amd64]
components:
  - name: app
    findImages: true
    images: [%s]
    charts: [{path: charts/app}]
`, worker))
	def := load(t, dir)
	var events []string
	res, err := build.Create(ctx, def, build.CreateOptions{
		Charts: limited, Render: limited, Output: filepath.Join(t.TempDir(), "p.tar"),
		Progress: func(p artifact.Progress) {
			if strings.HasPrefix(p.Item, "found image ") {
				events = append(events, p.Item)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, i := range res.Config.Components[0].Images {
		refs = append(refs, i.Ref)
		if i.Digest != m.Digest {
			t.Errorf("%s: digest %s, want %s", i.Ref, i.Digest, m.Digest)
		}
	}
	if !slices.Equal(refs, []string{worker, web}) {
		t.Errorf("package images %q", refs)
	}
	if len(res.Found) != 1 || !slices.Equal(res.Found[0].Missing, []string{web}) || !slices.Equal(res.Found[0].Unused, []string{worker}) {
		t.Errorf("found %+v", res.Found)
	}
	if !slices.Equal(events, []string{"found image " + web}) {
		t.Errorf("progress %q", events)
	}
	if len(def.Components[0].Images) != 1 {
		t.Errorf("create changed the definition: %+v", def.Components[0].Images)
	}
}
