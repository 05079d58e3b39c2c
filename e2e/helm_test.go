package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

const helmNS = "e2e-helm"

// A chart whose Deployment names docker.io/library/app:1.0; --set
// broken=true points its readiness probe at a port nothing serves.
var helmChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: app\nversion: 0.1.0\n",
	"values.yaml": "broken: false\n",
	"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: app
          image: docker.io/library/app:1.0
          args: ["serve", ":8080"]
          readinessProbe:
            httpGet: {port: {{ if .Values.broken }}9999{{ else }}8080{{ end }}}
            periodSeconds: 1
`,
	// A plain manifest bundle with another image.
	"manifests/other.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: other-config}
data: {greeting: hello}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: other}
spec:
  replicas: 1
  selector: {matchLabels: {app: other}}
  template:
    metadata: {labels: {app: other}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: other
          image: docker.io/library/other:2.0
          args: ["serve", ":8080"]
          readinessProbe: {httpGet: {port: 8080}, periodSeconds: 1}
`,
}

// helmPackage writes a package definition of version with two images —
// app:1.0 (its config labelled with variant) and other:2.0 (a layer of its
// own) — a chart and a manifest bundle, and creates it signed with priv.
func helmPackage(ctx context.Context, t *testing.T, c *harness.Cluster, version, variant string, format artifact.Format, priv *key.Private) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range helmChart {
		p := filepath.Join(dir, "chart", name)
		if strings.HasPrefix(name, "manifests/") {
			p = filepath.Join(dir, name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, im := range []struct {
		ref, tag string
		opts     mkimg.Options
	}{
		{"docker.io/library/app:1.0", "1.0", mkimg.Options{Labels: map[string]string{"variant": variant}}},
		{"docker.io/library/other:2.0", "2.0", mkimg.Options{Path: "other", Labels: map[string]string{"e2e": "other"}}},
	} {
		img, err := mkimg.New(c.Tiny(t), im.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := oras.CopyGraph(ctx, img, store, img.Manifest, oras.DefaultCopyGraphOptions); err != nil {
			t.Fatal(err)
		}
		if err := store.Tag(ctx, img.Manifest, im.tag); err != nil {
			t.Fatal(err)
		}
		digests[im.ref] = img.Manifest.Digest.String()
	}
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: e2e-helm, version: %s}
platforms: [linux/%s]
components:
  - name: app
    images:
      - {ref: docker.io/library/app:1.0, layout: images}
      - {ref: docker.io/library/other:2.0, layout: images}
    charts:
      - {path: chart, namespace: %s}
    manifests:
      - {name: other, namespace: %s, files: [manifests]}
`, version, runtime.GOARCH, helmNS, helmNS)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), "e2e-helm-"+version+format.Ext())
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, Format: format, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg, digests
}

// testKeys makes a key pair and returns the private and public keys.
func testKeys(t testing.TB) (*key.Private, *artifact.PublicKey) {
	t.Helper()
	dir := t.TempDir()
	kp, err := key.Generate([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.WriteFiles(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}
	priv, err := key.LoadPrivate(filepath.Join(dir, "k.key"), []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := artifact.LoadPublicKey(filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// TestDeployChartsAndManifests: a signed package with a chart and a
// manifest bundle is deployed (pods run their images from the in-cluster
// registry by digest), upgraded to a new version (new digests), an upgrade
// whose pod never gets ready is rolled back (the old version keeps
// running), a tampered package installs nothing, an unchanged redeploy
// pushes nothing, and remove takes everything away and shrinks the
// registry's storage.
func TestDeployChartsAndManifests(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 12*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	kube := genericclioptions.NewConfigFlags(true)
	kube.KubeConfig = &c.Kubeconfig
	st := &rollout.State{Client: c.Client, Namespace: cluster.DefaultNamespace}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = removePkg(ctx, c, "e2e-helm")
		_ = c.Client.CoreV1().Namespaces().Delete(ctx, helmNS, metav1.DeleteOptions{})
	})
	priv, pub := testKeys(t)
	keys := []*artifact.PublicKey{pub}
	open := func(p string) *artifact.Reader {
		r, err := artifact.Open(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// v1: install.
	v1, d1 := helmPackage(ctx, t, c, "1.0.0", "one", artifact.FormatTarZstd, priv)
	start := time.Now()
	rec, err := deployPkg(ctx, c, open(v1), deploy.Deploy{Keys: keys, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING deploy v1 (verify, push, helm install --wait, apply): %.1fs, %d bytes pushed", time.Since(start).Seconds(), rec.BytesPushed)
	if len(rec.Releases) != 1 || rec.Releases[0].Revision != 1 || rec.Releases[0].String() != helmNS+"/app" {
		t.Fatalf("releases %+v", rec.Releases)
	}
	if len(rec.Objects) != 2 {
		t.Fatalf("objects %+v", rec.Objects)
	}
	assertRunning(ctx, t, c, "app", "library/app", d1["docker.io/library/app:1.0"])
	assertRunning(ctx, t, c, "other", "library/other", d1["docker.io/library/other:2.0"])
	if _, err := c.Client.CoreV1().ConfigMaps(helmNS).Get(ctx, "other-config", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// v2: a new digest for app:1.0 → helm upgrade, pods roll to it.
	v2, d2 := helmPackage(ctx, t, c, "1.1.0", "two", artifact.FormatTarZstd, priv)
	if d2["docker.io/library/app:1.0"] == d1["docker.io/library/app:1.0"] {
		t.Fatal("v2's app image has v1's digest")
	}
	start = time.Now()
	rec, err = deployPkg(ctx, c, open(v2), deploy.Deploy{Keys: keys, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING deploy v2 (upgrade): %.1fs, %d bytes pushed", time.Since(start).Seconds(), rec.BytesPushed)
	if rec.Version != "1.1.0" || rec.Releases[0].Revision != 2 {
		t.Fatalf("after upgrade: %s, releases %#v", rec.Version, rec.Releases)
	}
	assertRunning(ctx, t, c, "app", "library/app", d2["docker.io/library/app:1.0"])

	// An upgrade whose pod never gets ready (through the CLI, with --set
	// and --timeout): rolled back, v2 keeps running, exit 1 with the reason.
	start = time.Now()
	ferry := filepath.Join(binDir(t), "ferry")
	cmd := exec.CommandContext(ctx, ferry, "deploy", v2, "--key", pub.Name, "--kubeconfig", c.Kubeconfig, "--set", "broken=true", "--timeout", "15s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "rolled back") || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Fatalf("ferry deploy of a never-ready upgrade: %v: %q", err, stderr.String())
	}
	t.Logf("refused after %.1fs: %s", time.Since(start).Seconds(), strings.TrimSpace(stderr.String()))
	last := lastRelease(t, kube, "app")
	if last.Info.Status != release.StatusDeployed || last.Version != 4 {
		t.Fatalf("after the rollback: revision %d %s", last.Version, last.Info.Status)
	}
	assertRunning(ctx, t, c, "app", "library/app", d2["docker.io/library/app:1.0"])
	if got, _ := st.Get(ctx, "e2e-helm"); got == nil || got.Version != "1.1.0" {
		t.Fatalf("record after the failed upgrade: %+v", got)
	}

	// A tampered v3 (one byte of a layer) and a wrong key: nothing pushed
	// or installed.
	v3, d3 := helmPackage(ctx, t, c, "1.2.0", "three", artifact.FormatTar, priv)
	flipLayerByte(t, v3)
	if _, err := deployPkg(ctx, c, open(v3), deploy.Deploy{Keys: keys}); !errors.Is(err, artifact.ErrCorrupt) {
		t.Fatalf("deploy of a tampered package: %v", err)
	}
	_, otherPub := testKeys(t)
	v3ok, _ := helmPackage(ctx, t, c, "1.2.0", "three", artifact.FormatTar, priv)
	if _, err := deployPkg(ctx, c, open(v3ok), deploy.Deploy{Keys: []*artifact.PublicKey{otherPub}}); !errors.Is(err, artifact.ErrSignature) {
		t.Fatalf("deploy with a wrong key: %v", err)
	}
	if code := registryStatus(ctx, t, c, "library/app", d3["docker.io/library/app:1.0"]); code != http.StatusNotFound {
		t.Fatalf("refused v3's image is in the registry (HEAD %d)", code)
	}
	if last := lastRelease(t, kube, "app"); last.Version != 4 {
		t.Fatalf("a refused deploy changed the release to revision %d", last.Version)
	}

	// Unchanged redeploys: the first upgrades back from the rollback's
	// values, the next pushes nothing and installs nothing.
	// (Installed here, as the controller does, while the Package the CLI
	// applied stays settled on its failed request.)
	if _, err := installHere(ctx, t, c, open(v2), kube, pub); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	rec, err = installHere(ctx, t, c, open(v2), kube, pub)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("TIMING redeploy of an unchanged package: %.1fs, %d bytes pushed, release revision %d", took.Seconds(), rec.BytesPushed, rec.Releases[0].Revision)
	if rec.BytesPushed != 0 || took > 10*time.Second || lastRelease(t, kube, "app").Version != rec.Releases[0].Revision {
		t.Fatalf("unchanged redeploy: %d bytes pushed in %s", rec.BytesPushed, took)
	}

	// remove: releases, objects, images and the record go; storage shrinks.
	start = time.Now()
	res, err := removePkg(ctx, c, "e2e-helm")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING remove: %.1fs; images deleted %v, kept %v; registry storage %d → %d bytes", time.Since(start).Seconds(), res.Images, res.Kept, res.Storage.Before, res.Storage.After)
	if res.Storage.After >= res.Storage.Before {
		t.Fatalf("storage did not shrink: %d → %d", res.Storage.Before, res.Storage.After)
	}
	if _, err := action.NewHistory(helmCfg(t, kube)).Run("app"); !errors.Is(err, driver.ErrReleaseNotFound) {
		t.Fatalf("release after remove: %v", err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps(helmNS).Get(ctx, "other-config", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("ConfigMap after remove: %v", err)
	}
	// Every version's images go, and the package itself.
	for _, img := range []struct{ repo, digest string }{
		{"library/app", d1["docker.io/library/app:1.0"]},
		{"library/app", d2["docker.io/library/app:1.0"]},
		{"library/other", d2["docker.io/library/other:2.0"]},
		{"e2e-helm", d1["docker.io/library/app:1.0"]},
		{"e2e-helm", rec.Root.String()},
	} {
		if code := registryStatus(ctx, t, c, img.repo, img.digest); code != http.StatusNotFound {
			t.Fatalf("%s@%s after remove: HEAD %d", img.repo, img.digest, code)
		}
	}
	if got, _ := st.Get(ctx, "e2e-helm"); got != nil {
		t.Fatalf("record after remove: %+v", got)
	}
	// The registry serves again after its restart: the package goes back in.
	if rec, err = deployPkg(ctx, c, open(v1), deploy.Deploy{Keys: keys, Timeout: 2 * time.Minute}); err != nil {
		t.Fatalf("deploy after remove: %v", err)
	}
	assertRunning(ctx, t, c, "app", "library/app", d1["docker.io/library/app:1.0"])
	out, err := exec.CommandContext(ctx, ferry, "remove", "e2e-helm", "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
	if err != nil {
		t.Fatalf("ferry remove: %v: %s", err, exitStderr(err))
	}
	var removed rollout.UninstallResult
	if err := json.Unmarshal(out, &removed); err != nil || removed.Version != "1.0.0" || len(removed.Releases) != 1 || len(removed.Images) != 2 || removed.Storage.After >= removed.Storage.Before {
		t.Fatalf("ferry remove printed %s (%v)", out, err)
	}
}

// assertRunning checks that Deployment name's pod template and its ready
// pod name repo@digest in the in-cluster registry, with the pull secret.
func assertRunning(ctx context.Context, t *testing.T, c *harness.Cluster, name, repo, digest string) {
	t.Helper()
	want := cluster.RegistryHost(cluster.DefaultNodePort) + "/" + repo + "@" + digest
	dep, err := c.Client.AppsV1().Deployments(helmNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Fatalf("Deployment %s names %s, want %s", name, got, want)
	}
	pods, err := c.Client.CoreV1().Pods(helmNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != want {
			continue
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Ready && strings.HasSuffix(s.ImageID, digest) {
				ready++
			}
		}
		if len(p.Spec.ImagePullSecrets) == 0 || p.Spec.ImagePullSecrets[0].Name != cluster.PullSecretName {
			t.Fatalf("pod %s has pull secrets %v", p.Name, p.Spec.ImagePullSecrets)
		}
	}
	if ready == 0 {
		t.Fatalf("no ready pod of %s runs %s", name, want)
	}
}

func lastRelease(t *testing.T, kube genericclioptions.RESTClientGetter, name string) *release.Release {
	t.Helper()
	hist, err := action.NewHistory(helmCfg(t, kube)).Run(name)
	if err != nil {
		t.Fatal(err)
	}
	var last *release.Release
	for _, r := range hist {
		if last == nil || r.Version > last.Version {
			last = r
		}
	}
	return last
}

// registryStatus is the status of a HEAD of a manifest in the in-cluster
// registry, with init's account.
func registryStatus(ctx context.Context, t *testing.T, c *harness.Cluster, repo, digest string) int {
	t.Helper()
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+cluster.RegistryHost(cluster.DefaultNodePort)+"/v2/"+repo+"/manifests/"+digest, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json")
	req.SetBasicAuth(string(sec.Data["username"]), string(sec.Data["password"]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// flipLayerByte changes one byte in the middle of the largest entry of a
// .tar package: a layer blob.
func flipLayerByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	off, size, _, err := fixture.LargestTarEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	b[off+size/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func helmCfg(t *testing.T, kube genericclioptions.RESTClientGetter) *action.Configuration {
	t.Helper()
	cfg := new(action.Configuration)
	if err := cfg.Init(kube, helmNS, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// installHere verifies r, pushes it into the in-cluster registry and
// installs it from this process with rollout.Apply, what the controller
// runs.
func installHere(ctx context.Context, t *testing.T, c *harness.Cluster, r *artifact.Reader, kube genericclioptions.RESTClientGetter, key *artifact.PublicKey) (*rollout.Record, error) {
	t.Helper()
	start := time.Now()
	if _, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{key}}); err != nil {
		return nil, err
	}
	host, cred, err := rollout.RegistryAccess(ctx, c.Client, cluster.DefaultNamespace)
	if err != nil {
		return nil, err
	}
	res, err := artifact.Mirror(ctx, r, host, artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred), Client: reach.RegistryClient()}})
	if err != nil {
		return nil, err
	}
	rec, err := rollout.Apply(ctx, c.Client, r.Config(), r.Root().Digest, rollout.ApplyOptions{Kube: kube, Timeout: 2 * time.Minute, BytesPushed: res.BytesPushed})
	if rec != nil {
		rec.PushTook = time.Since(start)
	}
	return rec, err
}
