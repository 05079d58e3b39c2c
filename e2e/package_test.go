package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"oras.land/oras-go/v2/registry/remote/auth"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// The Package client's logger (controller-runtime's) says nothing.
func init() { ctrllog.SetLogger(logr.Discard()) }

// pkgChart is a chart with one Deployment running docker.io/library/app:1.0
// (ready after .Values.delay seconds) and a ConfigMap.
var pkgChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"values.yaml": "delay: 0\ngreeting: hello\n",
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
            httpGet: {port: 8080}
            periodSeconds: 1
            initialDelaySeconds: {{ .Values.delay }}
`,
	"templates/configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: {{ .Values.greeting | quote }}
`,
}

// chartPackage creates package name at version, signed with priv: the app
// image (labelled with variant), the chart above released as name in
// namespace ns, and a manifest bundle with one ConfigMap name-manifest.
func chartPackage(ctx context.Context, t *testing.T, c *harness.Cluster, name, version, variant, ns string, priv *key.Private) (string, string) {
	t.Helper()
	return chartPackageWith(ctx, t, c, name, version, variant, ns, priv, nil)
}

// chartPackageWith is chartPackage made with sbom (nil: no SBOMs), the
// generator create runs for each image.
func chartPackageWith(ctx context.Context, t *testing.T, c *harness.Cluster, name, version, variant, ns string, priv *key.Private, sbom build.SBOMGenerator) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for f, data := range pkgChart {
		p := filepath.Join(dir, "chart", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s-manifest}\ndata: {version: %q}\n", name, version)
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "cm.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	image := layoutImage(ctx, t, dir, c.Tiny(t), mkimg.Options{Labels: map[string]string{"variant": variant}})
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: %s, version: %s}
platforms: [linux/%s]
components:
  - name: app
    images:
      - {ref: docker.io/library/app:1.0, layout: images}
    charts:
      - {path: chart, namespace: %s, releaseName: %s}
    manifests:
      - {name: extra, namespace: %s, files: [manifests]}
`, name, version, runtime.GOARCH, ns, name, ns)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), name+"-"+version+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, Format: artifact.FormatTar, SignKey: priv, SBOM: sbom}); err != nil {
		t.Fatal(err)
	}
	return pkg, image
}

// pushed puts a package into the in-cluster registry as ferry deploy does
// before it applies the Package, and returns its root digest.
func pushed(ctx context.Context, t *testing.T, c *harness.Cluster, pkg string, keys ...artifact.Verifier) string {
	t.Helper()
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: keys}); err != nil {
		t.Fatal(err)
	}
	host, cred, err := rollout.RegistryAccess(ctx, c.Client, cluster.DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Mirror(ctx, r, host, artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred), Client: reach.RegistryClient()}}); err != nil {
		t.Fatal(err)
	}
	return r.Root().Digest.String()
}

// keySecret stores a public key as a GitOps user would, and returns its
// reference.
func keySecret(ctx context.Context, t *testing.T, c *harness.Cluster, pub *artifact.PublicKey) v1alpha1.KeyReference {
	t.Helper()
	pem, err := os.ReadFile(pub.Name)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pem)
	name := "e2e-key-" + hex.EncodeToString(sum[:8])
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster.DefaultNamespace}, StringData: map[string]string{"cosign.pub": string(pem)}}
	if _, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return v1alpha1.KeyReference{Name: name}
}

// waitPackage waits until the Package's status answers its generation
// (and request) and cond holds.
func waitPackage(ctx context.Context, t *testing.T, pc client.Client, name string, d time.Duration, cond func(p *v1alpha1.Package) bool) *v1alpha1.Package {
	t.Helper()
	deadline := time.Now().Add(d)
	var p v1alpha1.Package
	for {
		err := pc.Get(ctx, client.ObjectKey{Namespace: cluster.DefaultNamespace, Name: name}, &p)
		if err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.Request == p.Annotations[v1alpha1.RequestAnnotation] && cond(&p) {
			return &p
		}
		if time.Now().After(deadline) {
			st, _ := json.Marshal(p.Status)
			t.Fatalf("Package %s: condition not met after %s (%v): status %s", name, d, err, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func isReady(p *v1alpha1.Package) bool {
	return meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.Ready)
}

func conditionReason(p *v1alpha1.Package, typ string) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, typ); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

// touch asks the controller to reconcile a Package now (as ferry deploy
// does), and returns the request.
func touch(ctx context.Context, t *testing.T, pc client.Client, name string) {
	t.Helper()
	var p v1alpha1.Package
	if err := pc.Get(ctx, client.ObjectKey{Namespace: cluster.DefaultNamespace, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[v1alpha1.RequestAnnotation] = fmt.Sprint(time.Now().UnixNano())
	if err := pc.Patch(ctx, &p, patch); err != nil {
		t.Fatal(err)
	}
}

func historyOf(t *testing.T, kube genericclioptions.RESTClientGetter, ns, name string) []*release.Release {
	t.Helper()
	cfg := new(action.Configuration)
	if err := cfg.Init(kube, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	h, err := action.NewHistory(cfg).Run(name)
	if err != nil {
		t.Fatalf("history of %s/%s: %v", ns, name, err)
	}
	return h
}

// TestPackageResource: Packages applied with the API alone (as kubectl
// apply or a GitOps tool would) install, upgrade, refuse another key's
// signature while the running version stays, put back what is deleted by
// hand, change nothing on an unchanged resync, survive a controller
// restart in the middle of an install, and keep an image two Packages
// share when one goes; bad specs are refused by the API server; a package
// deployed by an earlier ferry (a record only) is migrated by init.
func TestPackageResource(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 15*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	kube := genericclioptions.NewConfigFlags(false)
	kube.KubeConfig = &c.Kubeconfig
	const ns = "e2e-pkg"
	priv, pub := testKeys(t)
	otherPriv, otherPub := testKeys(t)
	ref := keySecret(ctx, t, c, pub)
	for _, name := range []string{"e2e-web", "e2e-slow", "e2e-old"} {
		forgetPackage(ctx, t, c, name) // from a run that failed
	}
	t.Cleanup(func() { dropPackageFinalizers(context.Background(), t, c, cluster.DefaultNamespace) })

	v1, app1 := chartPackage(ctx, t, c, "e2e-web", "1.0.0", "pkg-one", ns, priv)
	v2, app2 := chartPackage(ctx, t, c, "e2e-web", "1.1.0", "pkg-two", ns, priv)
	v3, _ := chartPackage(ctx, t, c, "e2e-web", "1.2.0", "pkg-three", ns, otherPriv)
	root1, root2 := pushed(ctx, t, c, v1, pub), pushed(ctx, t, c, v2, pub)
	root3 := pushed(ctx, t, c, v3, otherPub)

	t.Run("the API server refuses bad specs", func(t *testing.T) {
		for what, spec := range map[string]v1alpha1.PackageSpec{
			"no digest nor tag": {Repository: "e2e-web", Keys: []v1alpha1.KeyReference{ref}},
			"no keys":           {Repository: "e2e-web", Digest: root1},
			"a bad digest":      {Repository: "e2e-web", Digest: "sha256:xyz", Keys: []v1alpha1.KeyReference{ref}},
			"a bad key kind":    {Repository: "e2e-web", Digest: root1, Keys: []v1alpha1.KeyReference{{Kind: "Pod", Name: "x"}}},
		} {
			p := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: "e2e-bad"}, Spec: spec}
			err := pc.Create(ctx, p)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("%s: created (%v)", what, err)
			}
			t.Logf("%s: %v", what, err)
		}
	})

	// GitOps: the Package alone installs a package in the registry.
	start := time.Now()
	web := &v1alpha1.Package{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: "e2e-web"},
		Spec: v1alpha1.PackageSpec{Repository: "e2e-web", Digest: root1, Keys: []v1alpha1.KeyReference{ref},
			Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
	}
	if err := pc.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	p := waitPackage(ctx, t, pc, "e2e-web", 3*time.Minute, isReady)
	t.Logf("TIMING Package applied → Ready: %.1fs", time.Since(start).Seconds())
	if p.Status.Version != "1.0.0" || p.Status.Digest != root1 || p.Status.ShortDigest != strings.TrimPrefix(root1, "sha256:")[:12] ||
		len(p.Status.Releases) != 1 || len(p.Status.Objects) != 1 || len(p.Status.Images) != 1 || !conditionTrue(p, v1alpha1.Verified) || !conditionTrue(p, v1alpha1.Installed) ||
		len(p.Status.SignedBy) != 1 || !strings.Contains(p.Status.SignedBy[0], ref.Name) || !containsString(p.Finalizers, v1alpha1.Finalizer) {
		st, _ := json.Marshal(p.Status)
		t.Fatalf("status after install: %s (finalizers %v)", st, p.Finalizers)
	}
	assertPodImage(ctx, t, c, ns, "e2e-web", "library/app@"+app1)
	events := packageEvents(ctx, t, c, "e2e-web")
	if !strings.Contains(events, "Verified") || !strings.Contains(events, "Installed") {
		t.Fatalf("events: %s", events)
	}
	printed := packageTable(ctx, t, c)
	if !strings.Contains(printed, "e2e-web") || !strings.Contains(printed, "1.0.0") || !strings.Contains(printed, p.Status.ShortDigest) || !strings.Contains(printed, "True") {
		t.Fatalf("kubectl get packages would print:\n%s", printed)
	}
	t.Logf("kubectl get packages:\n%s", printed)

	t.Run("an unchanged resync changes nothing", func(t *testing.T) {
		before := objectVersions(ctx, t, c, ns)
		hist := historyOf(t, kube, ns, "e2e-web")
		touch(ctx, t, pc, "e2e-web")
		start := time.Now()
		waitPackage(ctx, t, pc, "e2e-web", time.Minute, isReady)
		t.Logf("TIMING unchanged resync of one Package: %.2fs", time.Since(start).Seconds())
		if after := objectVersions(ctx, t, c, ns); after != before {
			t.Fatalf("resync changed objects:\n%s\n→\n%s", before, after)
		}
		if h := historyOf(t, kube, ns, "e2e-web"); len(h) != len(hist) {
			t.Fatalf("resync made release revisions: %d → %d", len(hist), len(h))
		}
	})

	t.Run("what is deleted by hand comes back", func(t *testing.T) {
		if err := c.Client.AppsV1().Deployments(ns).Delete(ctx, "e2e-web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Client.CoreV1().ConfigMaps(ns).Delete(ctx, "e2e-web-manifest", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The controller resyncs every 20 s in these tests (initFerry).
		start := time.Now()
		deadline := start.Add(2 * time.Minute)
		for {
			_, derr := c.Client.AppsV1().Deployments(ns).Get(ctx, "e2e-web", metav1.GetOptions{})
			_, cerr := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "e2e-web-manifest", metav1.GetOptions{})
			if derr == nil && cerr == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not back after 2 minutes: %v, %v", derr, cerr)
			}
			time.Sleep(time.Second)
		}
		t.Logf("TIMING drift repaired by the resync after %.1fs", time.Since(start).Seconds())
		waitPackage(ctx, t, pc, "e2e-web", 2*time.Minute, isReady)
		assertPodImage(ctx, t, c, ns, "e2e-web", "library/app@"+app1)
	})

	t.Run("a new digest upgrades", func(t *testing.T) {
		setDigest(ctx, t, pc, "e2e-web", root2)
		p := waitPackage(ctx, t, pc, "e2e-web", 3*time.Minute, func(p *v1alpha1.Package) bool { return isReady(p) && p.Status.Digest == root2 })
		if p.Status.Version != "1.1.0" || p.Status.Releases[0].Revision < 2 {
			t.Fatalf("after upgrade: %+v", p.Status)
		}
		assertPodImage(ctx, t, c, ns, "e2e-web", "library/app@"+app2)
	})

	t.Run("another key's signature is refused, the running version stays", func(t *testing.T) {
		setDigest(ctx, t, pc, "e2e-web", root3)
		p := waitPackage(ctx, t, pc, "e2e-web", time.Minute, func(p *v1alpha1.Package) bool {
			return conditionReason(p, v1alpha1.Verified) == "False/"+v1alpha1.ReasonVerifyFailed
		})
		ready := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.Ready)
		if ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "keeps running") || p.Status.Version != "1.1.0" || p.Status.Digest != root2 {
			t.Fatalf("after a wrongly signed digest: %+v", p.Status)
		}
		t.Logf("Ready=False %s: %s", ready.Reason, ready.Message)
		assertPodImage(ctx, t, c, ns, "e2e-web", "library/app@"+app2)
		setDigest(ctx, t, pc, "e2e-web", root2)
		waitPackage(ctx, t, pc, "e2e-web", time.Minute, isReady)
	})

	t.Run("a controller restart in the middle of an install", func(t *testing.T) {
		// The chart's Deployment gets ready only after 25 s: the controller
		// is killed while Helm waits.
		// It runs the image e2e-web runs (the same variant, the same digest).
		slow, _ := chartPackage(ctx, t, c, "e2e-slow", "1.0.0", "pkg-two", "e2e-slow", priv)
		root := pushed(ctx, t, c, slow, pub)
		raw := json.RawMessage(`{"delay": 25}`)
		sp := &v1alpha1.Package{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: "e2e-slow"},
			Spec:       v1alpha1.PackageSpec{Repository: "e2e-slow", Digest: root, Keys: []v1alpha1.KeyReference{ref}},
		}
		sp.Spec.Values = jsonValues(raw)
		if err := pc.Create(ctx, sp); err != nil {
			t.Fatal(err)
		}
		waitRelease(ctx, t, kube, "e2e-slow", "e2e-slow", release.StatusPendingInstall)
		pod := controllerPod(ctx, t, c)
		if err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed %s while release e2e-slow was pending-install", pod)
		start := time.Now()
		p := waitPackage(ctx, t, pc, "e2e-slow", 4*time.Minute, isReady)
		t.Logf("TIMING Ready %.1fs after the kill", time.Since(start).Seconds())
		h := historyOf(t, kube, "e2e-slow", "e2e-slow")
		deployed := 0
		for _, r := range h {
			if r.Info.Status == release.StatusDeployed {
				deployed++
			}
		}
		deps, err := c.Client.AppsV1().Deployments("e2e-slow").List(ctx, metav1.ListOptions{})
		if err != nil || deployed != 1 || len(deps.Items) != 1 || p.Status.Releases[0].Revision != h[len(h)-1].Version {
			t.Fatalf("after the restart: %d revisions (%d deployed), %d Deployments (%v), status %+v", len(h), deployed, len(deps.Items), err, p.Status.Releases)
		}
	})

	t.Run("two Packages share an image: removing one keeps the other running", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "remove", "e2e-slow", "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
		if err != nil {
			t.Fatalf("ferry remove: %v: %s", err, exitStderr(err))
		}
		var res rollout.UninstallResult
		if err := json.Unmarshal(out, &res); err != nil || len(res.Releases) != 1 || !containsString(res.Kept, "library/app@"+app2) {
			t.Fatalf("ferry remove printed %s (%v)", out, err)
		}
		t.Logf("removed e2e-slow: images %v, kept %v", res.Images, res.Kept)
		if err := pc.Get(ctx, client.ObjectKey{Namespace: cluster.DefaultNamespace, Name: "e2e-slow"}, &v1alpha1.Package{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Package e2e-slow after remove: %v", err)
		}
		if _, err := c.Client.AppsV1().Deployments("e2e-slow").Get(ctx, "e2e-slow", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("e2e-slow's Deployment after remove: %v", err)
		}
		// e2e-web runs the same image: it stays in the registry, and
		// e2e-web's pods restart from it.
		if code := registryStatus(ctx, t, c, "library/app", app2); code != 200 {
			t.Fatalf("e2e-web's image after removing e2e-slow: HEAD %d", code)
		}
		if err := c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=e2e-web"}); err != nil {
			t.Fatal(err)
		}
		assertPodImage(ctx, t, c, ns, "e2e-web", "library/app@"+app2)
	})

	t.Run("init migrates a package deployed by an earlier ferry", func(t *testing.T) {
		// A record without a Package: what ferry deploy left before.
		old, _ := chartPackage(ctx, t, c, "e2e-old", "1.0.0", "pkg-old", "e2e-old", priv)
		r, err := artifact.Open(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		pushed(ctx, t, c, old, pub)
		rec, err := rollout.Apply(ctx, c.Client, r.Config(), r.Root().Digest, rollout.ApplyOptions{Kube: kube, Values: map[string]any{"greeting": "bonjour"}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "init", "--kubeconfig", c.Kubeconfig, "--key", pub.Name, "-o", "json").Output()
		if err != nil {
			t.Fatalf("ferry init: %v: %s", err, exitStderr(err))
		}
		var res struct{ Migrated []string }
		if err := json.Unmarshal(out, &res); err != nil || !containsString(res.Migrated, "e2e-old") || containsString(res.Migrated, "e2e-web") {
			t.Fatalf("ferry init printed %s (%v)", out, err)
		}
		p := waitPackage(ctx, t, pc, "e2e-old", 2*time.Minute, func(p *v1alpha1.Package) bool { return isReady(p) })
		h := historyOf(t, kube, "e2e-old", "e2e-old")
		cm, err := c.Client.CoreV1().ConfigMaps("e2e-old").Get(ctx, "e2e-old-config", metav1.GetOptions{})
		if err != nil || len(h) != 1 || p.Status.Digest != rec.Root.String() || cm.Data["greeting"] != "bonjour" {
			t.Fatalf("after migration: %d revisions, status %+v, ConfigMap %v (%v)", len(h), p.Status, cm, err)
		}
		if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "remove", "e2e-old", "--kubeconfig", c.Kubeconfig).CombinedOutput(); err != nil {
			t.Fatalf("ferry remove: %v: %s", err, out)
		}
	})

	t.Run("ferry list and remove read Packages", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "list", "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
		if err != nil {
			t.Fatalf("ferry list: %v: %s", err, exitStderr(err))
		}
		var list []struct {
			Name, Version, Ready string
			Package              bool
		}
		err = json.Unmarshal(out, &list)
		found := false
		for _, l := range list {
			found = found || l.Name == "e2e-web" && l.Version == "1.1.0" && l.Ready == "True" && l.Package
		}
		if err != nil || !found {
			t.Fatalf("ferry list printed %s (%v)", out, err)
		}
		out, err = exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "remove", "e2e-web", "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
		if err != nil {
			t.Fatalf("ferry remove: %v: %s", err, exitStderr(err))
		}
		var res rollout.UninstallResult
		if err := json.Unmarshal(out, &res); err != nil || res.Version != "1.1.0" || len(res.Releases) != 1 || len(res.Objects) != 1 || res.Storage.After >= res.Storage.Before {
			t.Fatalf("ferry remove printed %s (%v)", out, err)
		}
		if code := registryStatus(ctx, t, c, "library/app", app2); code != 404 {
			t.Fatalf("e2e-web's image after its remove: HEAD %d", code)
		}
	})
}

// TestPackageResyncBudget: 20 Packages, then a reinstall of all of them
// requested (RequestAnnotation) though nothing changed: how long it takes,
// and that it changes nothing; then all removed by one ferry remove. (The
// unchanged resync, which installs nothing, is TestPackageScale's.)
func TestPackageResyncBudget(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 15*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	ref := keySecret(ctx, t, c, pub)
	t.Cleanup(func() { dropPackageFinalizers(context.Background(), t, c, cluster.DefaultNamespace) })
	const n = 20
	names := make([]string, n)
	var wg sync.WaitGroup
	roots := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("e2e-many-%02d", i)
		pkg := manifestPackage(ctx, t, names[i], priv)
		roots[i] = pushed(ctx, t, c, pkg, pub)
	}
	start := time.Now()
	for i, name := range names {
		p := &v1alpha1.Package{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: name},
			Spec:       v1alpha1.PackageSpec{Repository: name, Digest: roots[i], Keys: []v1alpha1.KeyReference{ref}},
		}
		if err := pc.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		waitPackage(ctx, t, pc, name, 5*time.Minute, isReady)
	}
	t.Logf("TIMING %d Packages applied → all Ready: %.1fs", n, time.Since(start).Seconds())
	before := objectVersions(ctx, t, c, "e2e-many")
	start = time.Now()
	for _, name := range names {
		wg.Add(1)
		go func() { defer wg.Done(); touch(ctx, t, pc, name) }()
	}
	wg.Wait()
	for _, name := range names {
		waitPackage(ctx, t, pc, name, 5*time.Minute, isReady)
	}
	t.Logf("TIMING requested reinstall of %d unchanged Packages: %.1fs", n, time.Since(start).Seconds())
	if after := objectVersions(ctx, t, c, "e2e-many"); after != before {
		t.Fatalf("the resync changed objects:\n%s\n→\n%s", before, after)
	}
	// All removed by one command: the controller removes them two at a
	// time and garbage-collects the registry once for the batch.
	start = time.Now()
	var removed []rollout.UninstallResult
	if err := ferryJSON(ctx, t, c, &removed, append([]string{"remove"}, names...)...); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING %d Packages removed (one garbage collection for the batch): %.1fs", n, time.Since(start).Seconds())
	if len(removed) != n {
		t.Fatalf("ferry remove reported %d removals, want %d", len(removed), n)
	}
	for i, res := range removed {
		if res.Name != names[i] || res.Version != "1.0.0" || len(res.Objects) != 1 || res.Storage.Before == 0 || res.Storage.After >= res.Storage.Before {
			t.Fatalf("removal %d: %+v", i, res)
		}
	}
	for _, name := range names {
		if err := pc.Get(ctx, client.ObjectKey{Namespace: cluster.DefaultNamespace, Name: name}, &v1alpha1.Package{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Package %s after ferry remove: %v", name, err)
		}
	}
}

// manifestPackage is a package of one ConfigMap in namespace e2e-many.
func manifestPackage(ctx context.Context, t *testing.T, name string, priv *key.Private) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {k: v}\n", name)
	if err := os.WriteFile(filepath.Join(dir, "m", "cm.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\ncomponents:\n  - name: c\n    manifests:\n      - {name: m, namespace: e2e-many, files: [m]}\n", name)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), name+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Output: pkg, Format: artifact.FormatTar, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg
}

func jsonValues(raw json.RawMessage) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: raw} }

func conditionTrue(p *v1alpha1.Package, typ string) bool {
	return meta.IsStatusConditionTrue(p.Status.Conditions, typ)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func setDigest(ctx context.Context, t *testing.T, pc client.Client, name, root string) {
	t.Helper()
	var p v1alpha1.Package
	if err := pc.Get(ctx, client.ObjectKey{Namespace: cluster.DefaultNamespace, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.Digest = root
	if err := pc.Patch(ctx, &p, patch); err != nil {
		t.Fatal(err)
	}
}

// assertPodImage waits until Deployment name's ready pod runs
// 127.0.0.1:31999/<ref>.
func assertPodImage(ctx context.Context, t *testing.T, c *harness.Cluster, ns, name, ref string) {
	t.Helper()
	want := cluster.RegistryHost(cluster.DefaultNodePort) + "/" + ref
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err == nil {
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == want {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready pod of %s/%s runs %s (%v)", ns, name, want, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// objectVersions lists the resourceVersions of what a resync must leave
// alone: the objects of namespace ns, Helm's release Secrets there, and
// the records in ferry's namespace.
func objectVersions(ctx context.Context, t *testing.T, c *harness.Cluster, ns string) string {
	t.Helper()
	var b strings.Builder
	cms, err := c.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range cms.Items {
		fmt.Fprintf(&b, "ConfigMap %s %s\n", o.Name, o.ResourceVersion)
	}
	secs, err := c.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range secs.Items {
		fmt.Fprintf(&b, "Secret %s %s\n", o.Name, o.ResourceVersion)
	}
	deps, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range deps.Items {
		fmt.Fprintf(&b, "Deployment %s %d\n", o.Name, o.Generation)
	}
	recs, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: rollout.LabelPackage})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range recs.Items {
		fmt.Fprintf(&b, "record %s %s\n", o.Name, o.ResourceVersion)
	}
	return b.String()
}

func packageEvents(ctx context.Context, t *testing.T, c *harness.Cluster, name string) string {
	t.Helper()
	evs, err := c.Client.EventsV1().Events(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "%s %s: %s\n", e.Type, e.Reason, e.Note)
	}
	return b.String()
}

// packageTable is what kubectl get packages prints: the API server's
// table, from the CRD's printer columns.
func packageTable(ctx context.Context, t *testing.T, c *harness.Cluster) string {
	t.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/apis/ferry.dev/v1alpha1/namespaces/"+cluster.DefaultNamespace+"/packages").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, col := range table.ColumnDefinitions {
		if col.Priority == 0 {
			fmt.Fprintf(&b, "%s\t", strings.ToUpper(col.Name))
		}
	}
	b.WriteString("\n")
	for _, row := range table.Rows {
		for i, cell := range row.Cells {
			if table.ColumnDefinitions[i].Priority == 0 {
				fmt.Fprintf(&b, "%v\t", cell)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func controllerPod(ctx context.Context, t *testing.T, c *harness.Cluster) string {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + cluster.ControllerName})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("controller pods: %v (%d)", err, len(pods.Items))
	}
	return pods.Items[0].Name
}

// waitRelease waits until release name's last revision has status.
func waitRelease(ctx context.Context, t *testing.T, kube genericclioptions.RESTClientGetter, ns, name string, status release.Status) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	cfg := new(action.Configuration)
	if err := cfg.Init(kube, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	for {
		if h, err := action.NewHistory(cfg).Run(name); err == nil && len(h) > 0 && h[len(h)-1].Info.Status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("release %s/%s never %s", ns, name, status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
