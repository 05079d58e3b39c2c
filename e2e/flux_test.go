package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// Flux as TestFlux runs it: the controllers e2e/cluster/build.sh builds
// from e2e/flux (bin/<name> in the e2e cache, their config/ folders in
// flux/<name>/config), in their own namespace. The cluster has no DNS, so
// source-controller's Service takes a fixed cluster IP (in the Service
// range's static band, which dynamic allocation leaves alone) and
// advertises its artifacts there.
const (
	fluxVersion   = "v1.9.0"
	fluxNamespace = "flux-system"
	fluxStorageIP = "10.96.0.10"
)

var fluxControllers = []string{"source-controller", "kustomize-controller"}

var (
	gitRepositoriesGVR = schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "gitrepositories"}
	ociRepositoriesGVR = schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "ocirepositories"}
	helmReposGVR       = schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "helmrepositories"}
	helmChartsGVR      = schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "helmcharts"}
	kustomizationsGVR  = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
)

// TestFlux runs Flux's source-controller and kustomize-controller (built
// from the Go module proxy, see e2e/flux/go.mod) in the cluster, deployed by
// ferry as a package of their images (mkimg around the static binaries)
// and their own CRDs, RBAC and Deployments, so that their Pods pull from
// the in-cluster registry by digest like any workload. Then a package
// carrying a git repository (a kustomization of a Deployment naming
// docker.io/acme/web:1.0), that image and a chart (an OCI artifact under
// ghcr.io/acme/charts) is deployed, and the sources a user writes for the
// connected world — a GitRepository of the repository's https URL and a
// Kustomization of it, an OCIRepository of it, an OCI HelmRepository of
// ghcr.io/acme/charts and a HelmChart of web 1.0.0 — are pointed by the
// agent at the git server and the in-cluster registry and reconciled to
// Ready by Flux (an OCI HelmRepository has no status of its own: Flux
// reads it when it builds the HelmChart); the Kustomization's Pod runs,
// pulled by digest from the in-cluster registry. helm-controller is not
// built (the module proxy serves none of its versions), so no HelmRelease.
func TestFlux(t *testing.T) {
	c := harness.Get(t)
	cache := fluxCache(t)
	ctx := timeout(t, 6*time.Minute)
	t0 := time.Now()
	res, installed, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	priv, pub, _ := trustNewKey(ctx, t, c)
	registry, err := kube.ServiceHost(ctx, c.Client, cluster.DefaultNamespace, cluster.RegistryName)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}

	// Flux, a package deployed with ferry.
	start := time.Now()
	flux := fluxPackage(ctx, t, cache, priv)
	t.Cleanup(func() { removeFlux(t, c, flux) })
	if _, err := deployPkg(ctx, c, flux, deploy.Deploy{Keys: []*artifact.PublicKey{pub}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING Flux's package deployed, controllers Ready: %.1fs", time.Since(start).Seconds())
	for i, name := range fluxControllers {
		want := res.Registry + "/fluxcd/" + name + "@" + flux.Config().Components[0].Images[i].Digest.String()
		pods, err := c.Client.CoreV1().Pods(fluxNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("%s pods: %v (%d)", name, err, len(pods.Items))
		}
		if p := pods.Items[0]; p.Spec.Containers[0].Image != want || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("%s runs %s (%s), want %s", name, p.Spec.Containers[0].Image, p.Status.Phase, want)
		}
	}

	// The GitOps package: a repository, the image its Deployment names, a chart.
	start = time.Now()
	fleet := fleetPackage(ctx, t, c, priv)
	t.Cleanup(func() {
		if _, err := removePkg(context.Background(), c, "e2e-fleet"); err != nil {
			t.Errorf("remove e2e-fleet: %v", err)
		}
	})
	if _, err := deployPkg(ctx, c, fleet, deploy.Deploy{Keys: []*artifact.PublicKey{pub}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING the GitOps package deployed: %.1fs", time.Since(start).Seconds())
	comp := fleet.Config().Components[0]
	carried, web := comp.Repositories[0], comp.Images[0]

	// The sources, as written for the connected world.
	ns := c.Namespace(t)
	t.Cleanup(func() { deleteFluxObjects(t, dyn, ns) })
	start = time.Now()
	gitRepo := createFlux(ctx, t, dyn, gitRepositoriesGVR, ns, "GitRepository", "fleet", map[string]any{
		"url": carried.URL, "interval": "10m", "ref": map[string]any{"branch": "main"},
	})
	ociRepo := createFlux(ctx, t, dyn, ociRepositoriesGVR, ns, "OCIRepository", "fleet", map[string]any{
		"url": "oci://git.example.com/acme/fleet", "interval": "10m",
	})
	helmRepo := createFlux(ctx, t, dyn, helmReposGVR, ns, "HelmRepository", "charts", map[string]any{
		"type": "oci", "url": "oci://ghcr.io/acme/charts", "interval": "10m",
	})
	createFlux(ctx, t, dyn, helmChartsGVR, ns, "HelmChart", "web", map[string]any{
		"chart": "web", "version": "1.0.0", "interval": "10m",
		"sourceRef": map[string]any{"kind": "HelmRepository", "name": "charts"},
	})
	// What the agent made of them: nothing points outside the cluster.
	for _, f := range []struct {
		obj       *unstructured.Unstructured
		path      []string
		want, got string
	}{
		{obj: gitRepo, path: []string{"spec", "url"}, want: installed.Git + "/" + carried.Key + ".git"},
		{obj: gitRepo, path: []string{"spec", "ref", "branch"}, want: "main"},
		{obj: ociRepo, path: []string{"spec", "url"}, want: "oci://" + registry + "/" + carried.Path},
		{obj: ociRepo, path: []string{"spec", "ref", "digest"}, want: carried.Digest.String()},
		{obj: ociRepo, path: []string{"spec", "secretRef", "name"}, want: install.SourceRegistrySecretName},
		{obj: helmRepo, path: []string{"spec", "url"}, want: "oci://" + registry + "/acme/charts"},
		{obj: helmRepo, path: []string{"spec", "secretRef", "name"}, want: install.SourceRegistrySecretName},
	} {
		if got, _, _ := unstructured.NestedString(f.obj.Object, f.path...); got != f.want {
			t.Errorf("%s %s: %q, want %q", f.obj.GetKind(), strings.Join(f.path, "."), got, f.want)
		}
	}
	// The registry's Secret, copied into the namespace, names the address
	// source-controller pulls from.
	sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, install.SourceRegistrySecretName, metav1.GetOptions{})
	if err != nil {
		t.Errorf("Secret %s in %s: %v", install.SourceRegistrySecretName, ns, err)
	} else if cfg := string(sec.Data[corev1.DockerConfigJsonKey]); !strings.Contains(cfg, `"`+registry+`"`) {
		t.Errorf("Secret %s in %s names no %s: %s", install.SourceRegistrySecretName, ns, registry, cfg)
	}
	t.Logf("rewritten: GitRepository %s, OCIRepository %s, HelmRepository %s", installed.Git+"/"+carried.Key+".git", "oci://"+registry+"/"+carried.Path, "oci://"+registry+"/acme/charts")

	revision := "main@sha1:" + carried.Commit
	got := waitFluxReady(ctx, t, dyn, gitRepositoriesGVR, ns, "fleet")
	if rev, _, _ := unstructured.NestedString(got.Object, "status", "artifact", "revision"); rev != revision {
		t.Errorf("GitRepository artifact revision %q, want %q", rev, revision)
	}
	if u, _, _ := unstructured.NestedString(got.Object, "status", "artifact", "url"); !strings.HasPrefix(u, "http://"+fluxStorageIP+"/") {
		t.Errorf("GitRepository artifact url %q, want it on source-controller's Service", u)
	}
	t.Logf("TIMING GitRepository Ready: %.1fs", time.Since(start).Seconds())
	createFlux(ctx, t, dyn, kustomizationsGVR, ns, "Kustomization", "web", map[string]any{
		"interval": "10m", "path": "./apps/web", "prune": true, "wait": true, "timeout": "2m", "targetNamespace": ns,
		"sourceRef": map[string]any{"kind": "GitRepository", "name": "fleet"},
	})
	got = waitFluxReady(ctx, t, dyn, ociRepositoriesGVR, ns, "fleet")
	if rev, _, _ := unstructured.NestedString(got.Object, "status", "artifact", "revision"); !strings.HasSuffix(rev, carried.Digest.String()) {
		t.Errorf("OCIRepository artifact revision %q, want the carried digest %s", rev, carried.Digest)
	}
	got = waitFluxReady(ctx, t, dyn, helmChartsGVR, ns, "web")
	if rev, _, _ := unstructured.NestedString(got.Object, "status", "artifact", "revision"); rev != "1.0.0" {
		t.Errorf("HelmChart artifact revision %q, want 1.0.0", rev)
	}
	got = waitFluxReady(ctx, t, dyn, kustomizationsGVR, ns, "web")
	if rev, _, _ := unstructured.NestedString(got.Object, "status", "lastAppliedRevision"); rev != revision {
		t.Errorf("Kustomization applied %q, want %q", rev, revision)
	}
	t.Logf("TIMING sources and Kustomization Ready: %.1fs", time.Since(start).Seconds())

	// The Kustomization's Pod, pulled by digest from the in-cluster registry.
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("web pods: %v (%d)", err, len(pods.Items))
	}
	p := pods.Items[0]
	want := res.Registry + "/acme/web@" + web.Digest.String()
	if p.Spec.Containers[0].Image != want || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 ||
		!strings.HasSuffix(p.Status.ContainerStatuses[0].ImageID, web.Digest.String()) {
		t.Fatalf("web pod: image %s, phase %s, statuses %+v; want %s running", p.Spec.Containers[0].Image, p.Status.Phase, p.Status.ContainerStatuses, want)
	}
	t.Logf("web pod %s runs %s", p.Name, p.Spec.Containers[0].Image)
	t.Logf("TIMING TestFlux up to its cleanup: %.1fs", time.Since(t0).Seconds())
}

// fluxCache returns the e2e cache where build.sh put Flux's controllers
// and their config/ folders.
func fluxCache(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FERRY_E2E_CACHE")
	for _, name := range fluxControllers {
		if _, err := os.Stat(filepath.Join(dir, "flux", name, "config")); dir == "" || err != nil {
			t.Fatalf("Flux's %s is not in the e2e cache %q (e2e/cluster/build.sh builds it): %v", name, dir, err)
		}
	}
	return dir
}

// fluxPackage makes a signed package of Flux's controllers: their images
// (the static binaries, as user 65534 like Flux's own images) and one
// manifest bundle of their CRDs, RBAC, Deployments and Service.
func fluxPackage(ctx context.Context, t *testing.T, cache string, priv *key.Private) *artifact.Reader {
	t.Helper()
	dir := t.TempDir()
	var images, docs []string
	for _, name := range fluxControllers {
		bin, err := os.ReadFile(filepath.Join(cache, "bin", name))
		if err != nil {
			t.Fatal(err)
		}
		layoutTagged(ctx, t, dir, name, bin, mkimg.Options{Path: name, User: "65534:65534"})
		images = append(images, fmt.Sprintf("      - {ref: docker.io/fluxcd/%s:%s, layout: images, tag: %s}\n", name, fluxVersion, name))
		docs = append(docs, fluxManifests(t, filepath.Join(cache, "flux", name, "config"))...)
	}
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "flux.yaml"), []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: e2e-flux, version: %s}
platforms: [linux/%s]
components:
  - name: flux
    images:
%s    manifests:
      - {name: flux, namespace: %s, files: [manifests]}
`, strings.TrimPrefix(fluxVersion, "v"), runtime.GOARCH, strings.Join(images, ""), fluxNamespace)
	return createPackage(ctx, t, dir, def, priv)
}

// fluxManifests builds a controller's config/{crd,rbac,manager} as
// kustomize would for what they use (resources, namePrefix, images), in
// fluxNamespace, and gives source-controller's Service the fixed cluster
// IP it advertises its artifacts on.
func fluxManifests(t *testing.T, config string) []string {
	t.Helper()
	var out []string
	for _, sub := range []string{"crd", "rbac", "manager"} {
		dir := filepath.Join(config, sub)
		var k struct {
			Resources  []string `json:"resources"`
			NamePrefix string   `json:"namePrefix"`
			Images     []struct {
				Name    string `json:"name"`
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
			} `json:"images"`
		}
		readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
		var objs []*unstructured.Unstructured
		for _, r := range k.Resources {
			objs = append(objs, decodeObjects(t, filepath.Join(dir, r))...)
		}
		names := map[string]bool{}
		for _, o := range objs {
			names[o.GetName()] = true
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
			default:
				o.SetNamespace(fluxNamespace)
			}
			if k.NamePrefix != "" {
				o.SetName(k.NamePrefix + o.GetName())
				if ref, ok, _ := unstructured.NestedString(o.Object, "roleRef", "name"); ok && names[ref] {
					_ = unstructured.SetNestedField(o.Object, k.NamePrefix+ref, "roleRef", "name")
				}
			}
			if subjects, ok, _ := unstructured.NestedSlice(o.Object, "subjects"); ok {
				for _, s := range subjects {
					if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
						m["namespace"] = fluxNamespace
					}
				}
				_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
			}
			switch o.GetKind() {
			case "Deployment":
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				for _, ct := range containers {
					m := ct.(map[string]any)
					for _, img := range k.Images {
						if m["image"] == img.Name {
							m["image"] = img.NewName + ":" + img.NewTag
						}
					}
					args, _ := m["args"].([]any)
					for i, a := range args {
						if s, _ := a.(string); strings.HasPrefix(s, "--storage-adv-addr=") {
							args[i] = "--storage-adv-addr=" + fluxStorageIP
						}
					}
				}
				_ = unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
			case "Service":
				_ = unstructured.SetNestedField(o.Object, fluxStorageIP, "spec", "clusterIP")
			}
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// decodeObjects reads the objects of a multi-document YAML file.
func decodeObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// fleetPackage makes a signed package of a git repository (made with
// Debian's git: apps/web, a kustomization of a Deployment of
// docker.io/acme/web:1.0), that image (the tiny program, pausing) and the
// chart web 1.0.0 as the OCI artifact ghcr.io/acme/charts/web:1.0.0.
func fleetPackage(ctx context.Context, t *testing.T, c *harness.Cluster, priv *key.Private) *artifact.Reader {
	t.Helper()
	src := t.TempDir()
	gitCmd(t, src, "init", "-q", "-b", "main")
	for name, data := range map[string]string{
		"apps/web/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deploy.yaml]\n",
		"apps/web/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: web, image: docker.io/acme/web:1.0}]
`,
	} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitCmd(t, src, "add", ".")
	gitCmd(t, src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "web")

	dir := t.TempDir()
	gitCmd(t, "", "clone", "-q", src, filepath.Join(dir, "fleet"))
	layoutTagged(ctx, t, dir, "web", c.Tiny(t), mkimg.Options{Cmd: []string{"pause"}, Labels: map[string]string{"e2e": "flux"}})
	chartArtifact(ctx, t, dir, "chart")
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: e2e-fleet, version: 1.0.0}
platforms: [linux/%[1]s]
components:
  - name: gitops
    images:
      - {ref: docker.io/acme/web:1.0, layout: images, tag: web}
      - {ref: ghcr.io/acme/charts/web:1.0.0, layout: images, tag: chart, platform: linux/%[1]s}
    repositories:
      - {url: "https://git.example.com/acme/fleet.git", path: fleet, ref: main}
`, runtime.GOARCH)
	return createPackage(ctx, t, dir, def, priv)
}

// createPackage writes def into dir, creates the package it defines,
// signed with priv, and opens it.
func createPackage(ctx context.Context, t *testing.T, dir, def string, priv *key.Private) *artifact.Reader {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), "pkg.tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Output: pkg, Git: gitrepo.Fetcher{}, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// layoutTagged stores a one-layer image of binary in the OCI layout
// dir/images under tag and returns its manifest's digest.
func layoutTagged(ctx context.Context, t *testing.T, dir, tag string, binary []byte, opts mkimg.Options) string {
	t.Helper()
	img, err := mkimg.New(binary, opts)
	if err != nil {
		t.Fatal(err)
	}
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	if err := oras.CopyGraph(ctx, img, store, img.Manifest, oras.DefaultCopyGraphOptions); err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, img.Manifest, tag); err != nil {
		t.Fatal(err)
	}
	return img.Manifest.Digest.String()
}

// chartArtifact stores the chart web 1.0.0 (one ConfigMap) as Helm pushes
// a chart to an OCI registry, in the layout dir/images under tag.
func chartArtifact(ctx context.Context, t *testing.T, dir, tag string) {
	t.Helper()
	helmChartLayout(ctx, t, dir, tag,
		[2]string{"web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 1.0.0\n"},
		[2]string{"web/templates/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {from: flux}\n"})
}

// helmChartLayout stores a chart web 1.0.0 of files (name, content) as
// Helm pushes a chart to an OCI registry, in the layout dir/images under
// tag.
func helmChartLayout(ctx context.Context, t *testing.T, dir, tag string, files ...[2]string) {
	t.Helper()
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		name, data := f[0], f[1]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]string{"apiVersion": "v2", "name": "web", "version": "1.0.0"})
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	push := func(mediaType string, b []byte) ocispec.Descriptor {
		desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := store.Push(ctx, desc, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return desc
	}
	cfgDesc := push(artifact.MediaTypeHelmConfig, cfg)
	layer := push(artifact.MediaTypeHelmChart, tgz.Bytes())
	m, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{
		ConfigDescriptor: &cfgDesc, Layers: []ocispec.Descriptor{layer},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, m, tag); err != nil {
		t.Fatal(err)
	}
}

// createFlux creates a Flux object of kind with spec in ns and returns it
// as the API server stored it (after the agent's rewrite).
func createFlux(ctx context.Context, t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, kind, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
	got, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", kind, name, err)
	}
	return got
}

// waitFluxReady waits until a Flux object's Ready condition is True for its
// generation, and returns it.
func waitFluxReady(ctx context.Context, t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	last := "no Ready condition"
	for {
		obj, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] != "Ready" {
					continue
				}
				last = fmt.Sprintf("Ready=%v %v: %v", m["status"], m["reason"], m["message"])
				if gen, _ := m["observedGeneration"].(int64); m["status"] == "True" && gen == obj.GetGeneration() {
					return obj
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s %s/%s not Ready: %s (%v)", gvr.Resource, ns, name, last, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deleteFluxObjects deletes the test's Flux objects while the controllers
// still run (their finalizers; the Kustomization prunes its Deployment)
// and waits until they are gone.
func deleteFluxObjects(t *testing.T, dyn dynamic.Interface, ns string) {
	deleteObjects(t, dyn, ns, 90*time.Second, kustomizationsGVR, helmChartsGVR, helmReposGVR, ociRepositoriesGVR, gitRepositoriesGVR)
}

// removeFlux removes Flux's package (its controllers, RBAC and CRDs go
// with it) and namespace, and checks that no CRD of Flux's is left.
func removeFlux(t *testing.T, c *harness.Cluster, flux *artifact.Reader) {
	removeController(t, c, flux, fluxNamespace, "Flux", 2*time.Minute, func(g string) bool { return strings.HasSuffix(g, ".toolkit.fluxcd.io") })
}
