package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// TestThirdPartyCharts carries charts as their projects publish them
// (subcharts folded and packaged, CRDs, hooks, schemas, lookups): create
// packages each one, twice from two copies, to the same bytes; inspect lists
// it; and the real helm renders the carried chart exactly as it renders the
// source folder.
func TestThirdPartyCharts(t *testing.T) {
	helm := peertool.Require(t, "helm")
	for _, c := range thirdparty.Charts {
		t.Run(c.Name, func(t *testing.T) {
			ctx := context.Background()
			src := c.Dir(t)
			var roots []ocispec.Descriptor
			var archive string
			for i := range 2 {
				dir := t.TempDir()
				c.Copy(t, filepath.Join(dir, "charts"))
				writeFile(t, filepath.Join(dir, definition.FileName), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: %[1]s
  version: 1.0.0
components:
  - name: %[1]s
    charts:
      - path: charts/%[1]s
        namespace: %[1]s
`, c.Name))
				def, err := definition.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				archive = filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.tar", c.Name, i))
				res, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: archive})
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				roots = append(roots, res.Root)
			}
			if roots[0].Digest != roots[1].Digest {
				t.Errorf("two creates of the same chart: roots %s and %s", roots[0].Digest, roots[1].Digest)
			}

			r, err := artifact.Open(ctx, archive)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := artifact.Inspect(ctx, r, "", nil)
			if err != nil {
				t.Fatalf("inspect: %v", err)
			}
			charts := rep.Components[0].Charts
			if len(charts) != 1 || charts[0].Name != c.Name || charts[0].Namespace != c.Name {
				t.Fatalf("inspect lists charts %+v", charts)
			}
			t.Logf("%s %s (%s@%s): %d bytes carried, root %s", charts[0].Name, charts[0].Version, c.Module, c.Version, charts[0].Size, roots[0].Digest)

			// The chart's layer, as helm pulls it (TestHelmPullFromPackage).
			layout := extractLayout(t, archive)
			var m ocispec.Manifest
			if err := json.Unmarshal(blob(t, layout, charts[0].Digest.Encoded()), &m); err != nil {
				t.Fatal(err)
			}
			tgz := filepath.Join(t.TempDir(), c.Name+".tgz")
			if err := os.WriteFile(tgz, blob(t, layout, m.Layers[0].Digest.Encoded()), 0o644); err != nil {
				t.Fatal(err)
			}
			values := filepath.Join(t.TempDir(), "values.yaml")
			data, err := yaml.Marshal(c.Values)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(values, data, 0o644); err != nil {
				t.Fatal(err)
			}
			want := helmTemplate(t, helm, src, c.Name, values)
			got := helmTemplate(t, helm, tgz, c.Name, values)
			if !bytes.Equal(got, want) {
				t.Errorf("helm template of the carried chart (%d bytes) differs from the source's (%d bytes):\n%s", len(got), len(want), firstDiff(got, want))
			}
			t.Logf("helm template: %d bytes, %d documents, equal", len(want), bytes.Count(want, []byte("\n---"))+1)
		})
	}
}

// TestChartMissingDependencies: a chart naming dependencies its charts/
// folder lacks (Kyverno's chart as its v1.19.1 module holds it: three from
// Helm repositories) is refused by create, naming them, as `helm install`
// refuses it; Helm's SDK would install it without them.
func TestChartMissingDependencies(t *testing.T) {
	dir := t.TempDir()
	thirdparty.Kyverno119.Copy(t, filepath.Join(dir, "charts"))
	writeFile(t, filepath.Join(dir, definition.FileName), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: kyverno
  version: 1.0.0
components:
  - name: kyverno
    charts:
      - path: charts/kyverno
`)
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "kyverno.tar")
	_, err = build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out})
	if err == nil {
		t.Fatal("create packaged a chart whose dependencies are missing")
	}
	msg := err.Error()
	for _, want := range []string{"charts/kyverno", "kyverno-api, openreports, reports-server", "helm dependency build"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("create left %s behind (%v)", out, err)
	}
	t.Log(msg)

	// Once `helm dependency build` has put them in charts/ (here: empty
	// charts of those names), create packages it.
	for _, name := range []string{"kyverno-api", "openreports", "reports-server"} {
		writeFile(t, filepath.Join(dir, "charts", "kyverno", "charts", name, "Chart.yaml"), "apiVersion: v2\nname: "+name+"\nversion: 0.1.0\n")
	}
	if _, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out}); err != nil {
		t.Fatalf("create with the dependencies in charts/: %v", err)
	}
}

func blob(t testing.TB, layout, hex string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", hex))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// helmTemplate renders a chart with the real helm, CRDs included, for the
// e2e cluster's Kubernetes version.
func helmTemplate(t testing.TB, helm, chartPath, name, values string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm, "template", name, chartPath, "-n", name, "--include-crds", "--kube-version", thirdparty.KubeVersion, "-f", values)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", chartPath, err, stderr.Bytes())
	}
	if len(out) < 1000 {
		t.Fatalf("helm template %s rendered only %d bytes", chartPath, len(out))
	}
	return out
}

// firstDiff shows where two renderings part.
func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, lb[i], la[i])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d and %d lines)", len(la), len(lb))
}
