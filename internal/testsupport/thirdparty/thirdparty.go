// Package thirdparty gives tests real software made by others: Helm charts
// as their projects publish them inside their Go modules, fetched through the
// Go module proxy (checked against the checksum database like any module) into
// the module cache. Nothing here is written for ferry's tests: the charts
// carry their own subcharts, CRDs, hooks, schemas, lookups and image
// references.
//
// A test asks for a chart with Chart. When the module cannot be fetched, the
// test is skipped, or fails under FERRY_REQUIRE_TOOLS=1 (as `make test` and CI
// set it), so that CI never passes without having run it.
package thirdparty

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// KubeVersion is the Kubernetes version charts are rendered for (the e2e
// cluster's): `helm template` otherwise assumes v1.20, which charts with a
// kubeVersion constraint refuse.
const KubeVersion = "v1.35.4"

// A Chart is a Helm chart inside a project's Go module.
type Chart struct {
	Name    string // short name, the chart's own
	Module  string // Go module path
	Version string // module version
	Path    string // the chart's folder inside the module

	// Values the e2e cluster (one node, 2 cores) needs, as a user would set
	// them; nil for the chart's defaults.
	Values map[string]any
}

// Charts are the third-party charts the tests carry, chosen for what real
// charts do that generated ones don't:
//
//   - kyverno: two subcharts in charts/ (crds, grafana), 11 CRDs rendered
//     from a subchart's templates, post-upgrade, pre- and post-delete and
//     test hooks, `lookup`, 8 images. (Kyverno v1.18 and v1.19 name three
//     dependencies from Helm repositories that their module does not carry,
//     and one of them, reports-server, is in no module the proxy serves: such
//     a chart is refused by create, naming them; see the tests.)
//   - gatekeeper: 17 CRDs in crds/, pre-install/pre-upgrade hook Jobs, a
//     webhook, images in Jobs and Deployments.
//   - metallb: a local subchart (crds) and a packaged one (frr-k8s .tgz),
//     values.schema.json, 13 CRDs, a DaemonSet with init containers.
var Charts = []Chart{
	{
		Name: "kyverno", Module: "github.com/kyverno/kyverno", Version: "v1.13.4", Path: "charts/kyverno",
	},
	{
		Name: "gatekeeper", Module: "github.com/open-policy-agent/gatekeeper/v3", Version: "v3.23.1", Path: "charts/gatekeeper",
		Values: map[string]any{"replicas": 1},
	},
	{
		Name: "metallb", Module: "go.universe.tf/metallb", Version: "v0.16.2", Path: "charts/metallb",
	},
}

// Kyverno119 is Kyverno's chart as v1.19.1 publishes it in its module: its
// Chart.yaml names kyverno-api, openreports and reports-server from Helm
// repositories, which charts/ does not hold.
var Kyverno119 = Chart{Name: "kyverno", Module: "github.com/kyverno/kyverno", Version: "v1.19.1", Path: "charts/kyverno"}

// ImageLike are charts that pass images outside image fields, or write a
// placeholder where an image goes, which find-images reports apart (maybe
// images, placeholders); they are rendered only, never deployed:
//
//   - cert-manager: the ACME HTTP-01 solver's image is an argument of the
//     controller's container (--acme-http01-solver-image=…); its module's
//     chart has version and appVersion v0.0.0 (the release tool sets them).
//   - istiod (Istio's control plane): the sidecar injector's proxy image is
//     named in a ConfigMap's JSON values as global.hub, global.tag and
//     global.proxy.image, joined by the injector; its injection templates
//     name an init image (busybox:1.28) as text.
//   - istio-gateway: a Deployment whose image is `auto`, the placeholder
//     Istio's injector replaces with its proxy image.
//
// Istio tags its releases without a "v", so the proxy serves its module
// at pseudo-versions only: this one is main of 2026-04-23. Its charts
// name the hub and tag its builds push to (registry.istio.io/testing,
// latest); a release's charts name docker.io/istio and the release.
//
// Three more, large and much installed, name every image in an image
// field (with or without their optional parts: Hubble, SPIRE, the
// default backend, a webhook provider), so that nothing of their
// arguments, environment, ConfigMaps or annotations may be read as a
// maybe image:
//
//   - cilium: an agent DaemonSet with six init containers, Envoy by
//     digest, a ConfigMap of 164 keys; Hubble's TLS certificates are made
//     anew at each rendering (genCA).
//   - ingress-nginx: images by tag and digest, admission hook Jobs. Its
//     controller tags (controller-v1.11.0) are no Go versions, so the
//     proxy serves one pseudo-version, main of 2024-07-08: chart 4.11.0,
//     controller v1.11.0.
//   - external-dns: from chart 1.21 on, `policy` has no default and the
//     schema requires it; upsert-only was the default before. Its v0.23.0
//     module needs Go 1.27, so this is v0.22.0 (chart 1.21.1, image
//     v0.21.0).
var ImageLike = []Chart{
	{Name: "cert-manager", Module: "github.com/cert-manager/cert-manager", Version: "v1.21.2", Path: "deploy/charts/cert-manager"},
	{Name: "istiod", Module: "istio.io/istio", Version: istio, Path: "manifests/charts/istio-control/istio-discovery"},
	{Name: "gateway", Module: "istio.io/istio", Version: istio, Path: "manifests/charts/gateway"},
	{Name: "cilium", Module: "github.com/cilium/cilium", Version: "v1.20.2", Path: "install/kubernetes/cilium"},
	{Name: "ingress-nginx", Module: "k8s.io/ingress-nginx", Version: "v0.0.0-20240708192948-52c50467d67d", Path: "charts/ingress-nginx"},
	{
		Name: "external-dns", Module: "sigs.k8s.io/external-dns", Version: "v0.22.0", Path: "charts/external-dns",
		Values: map[string]any{"policy": "upsert-only"},
	},
}

const istio = "v0.0.0-20260423205519-b01690e6db7d"

// ByName returns the chart of Charts with that name.
func ByName(t testing.TB, name string) Chart {
	t.Helper()
	for _, c := range Charts {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("thirdparty: no chart %q", name)
	return Chart{}
}

// Dir returns the chart's folder in the module cache (read-only), fetching
// the module first if needed.
func (c Chart) Dir(t testing.TB) string {
	t.Helper()
	dir, err := ModuleDir(c.Module, c.Version)
	if err != nil {
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatalf("thirdparty: %v", err)
		}
		t.Skipf("thirdparty: %v (FERRY_REQUIRE_TOOLS=1 turns this skip into a failure)", err)
	}
	d := filepath.Join(dir, filepath.FromSlash(c.Path))
	if _, err := os.Stat(filepath.Join(d, "Chart.yaml")); err != nil {
		t.Fatalf("thirdparty: %s@%s has no chart at %s: %v", c.Module, c.Version, c.Path, err)
	}
	return d
}

// Copy copies the chart's folder into a new writable folder under dir and
// returns it (the module cache is read-only).
func (c Chart) Copy(t testing.TB, dir string) string {
	t.Helper()
	src := c.Dir(t)
	dst := filepath.Join(dir, c.Name)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatalf("thirdparty: copy %s: %v", c.Name, err)
	}
	// The module cache's files are read-only; a copy is the user's own.
	if err := filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	}); err != nil {
		t.Fatalf("thirdparty: copy %s: %v", c.Name, err)
	}
	return dst
}

var (
	mu   sync.Mutex
	dirs = map[string]string{}
)

// ModuleDir returns where module@version is in the module cache, downloading
// it through the Go module proxy if it is not there yet.
func ModuleDir(module, version string) (string, error) {
	key := module + "@" + version
	mu.Lock()
	defer mu.Unlock()
	if d, ok := dirs[key]; ok {
		return d, nil
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, "mod", "download", "-json", key)
	// Outside any module: GOFLAGS=-mod=… of the caller would be refused.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=on")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info.Error != "" || info.Dir == "" {
		msg := info.Error
		if msg == "" {
			msg = string(bytes.TrimSpace(stderr.Bytes()))
		}
		if msg == "" && runErr != nil {
			msg = runErr.Error()
		}
		return "", fmt.Errorf("go mod download %s: %s", key, msg)
	}
	dirs[key] = info.Dir
	return info.Dir, nil
}
