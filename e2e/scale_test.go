package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/controller"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestPackageScale is the fleet-scale bench: 100 Packages of 5 images
// each (500 images in 500 repositories), applied at once. It measures (as
// TIMING lines, budgets in brackets; no timed assertion) apply → Ready of
// one package [3 s], of all, an unchanged resync of all 100 through the
// controller's own Reconciler and cache [2 s], the dashboard's list page
// [200 ms], `ferry list` [1 s], and `ferry remove` of all of them [one
// garbage collection per batch]; and asserts what must hold: the resync
// changes nothing, the list shows every Package, nothing is left.
func TestPackageScale(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 20*time.Minute)
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
	const n, images = 100, 5
	names := make([]string, n)
	roots := make([]string, n)
	start := time.Now()
	for i := range n {
		names[i] = fmt.Sprintf("e2e-scale-%03d", i)
		roots[i] = pushed(ctx, t, c, imagesPackage(ctx, t, names[i], images, priv), pub)
	}
	t.Logf("TIMING %d packages of %d images created and pushed: %.1fs", n, images, time.Since(start).Seconds())
	apply := func(i int) {
		p := &v1alpha1.Package{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: names[i]},
			Spec:       v1alpha1.PackageSpec{Repository: names[i], Digest: roots[i], Keys: []v1alpha1.KeyReference{ref}},
		}
		if err := pc.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	start = time.Now()
	apply(0)
	waitPackage(ctx, t, pc, names[0], 5*time.Minute, isReady)
	t.Logf("TIMING one Package applied → Ready: %.2fs [budget 3s]", time.Since(start).Seconds())
	start = time.Now()
	for i := 1; i < n; i++ {
		apply(i)
	}
	for _, name := range names {
		waitPackage(ctx, t, pc, name, 10*time.Minute, isReady)
	}
	t.Logf("TIMING %d more Packages applied → all Ready: %.1fs", n-1, time.Since(start).Seconds())

	before := objectVersions(ctx, t, c, "e2e-scale")
	resyncAll(ctx, t, c, names)
	if after := objectVersions(ctx, t, c, "e2e-scale"); after != before {
		t.Fatalf("the resync changed objects:\n%s\n→\n%s", before, after)
	}

	base := serveDashboard(t, c.Kubeconfig, false)
	var page string
	best := time.Hour
	for range 5 {
		start = time.Now()
		page = httpGet(ctx, t, base+"/")
		best = min(best, time.Since(start))
	}
	t.Logf("TIMING dashboard list page of %d Packages (%d bytes): best of 5 %.0fms [budget 200ms]", n, len(page), best.Seconds()*1000)
	for _, name := range names {
		if !strings.Contains(page, name) {
			t.Fatalf("the dashboard's list lacks %s", name)
		}
	}

	start = time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "list", "--kubeconfig", c.Kubeconfig).Output()
	t.Logf("TIMING ferry list of %d Packages: %.2fs [budget 1s]", n, time.Since(start).Seconds())
	if err != nil {
		t.Fatalf("ferry list: %v: %s", err, exitStderr(err))
	}
	for _, name := range names {
		if !strings.Contains(string(out), name) {
			t.Fatalf("ferry list lacks %s:\n%s", name, out)
		}
	}

	start = time.Now()
	var removed []rollout.UninstallResult
	if err := ferryJSON(ctx, t, c, &removed, append([]string{"remove"}, names...)...); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING %d Packages removed by one ferry remove: %.1fs", n, time.Since(start).Seconds())
	if len(removed) != n {
		t.Fatalf("ferry remove reported %d removals, want %d", len(removed), n)
	}
	for i, res := range removed {
		if res.Name != names[i] || len(res.Images) != images {
			t.Fatalf("removal %d: %+v", i, res)
		}
	}
	repo, d, _ := strings.Cut(removed[0].Images[0], "@")
	if code := registryStatus(ctx, t, c, repo, d); code != http.StatusNotFound {
		t.Fatalf("an image of a removed package: HEAD %d", code)
	}
}

// resyncAll runs an unchanged resync of the Packages names through the
// controller's own Reconciler over a manager's cache, as the in-cluster
// controller does (two at a time), and logs how long it took. Each must
// settle without an error and wait for the next resync.
func resyncAll(ctx context.Context, t *testing.T, c *harness.Cluster, names []string) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{cluster.DefaultNamespace: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	kube := genericclioptions.NewConfigFlags(true)
	kube.KubeConfig = &c.Kubeconfig
	r := &controller.Reconciler{Client: mgr.GetClient(), Clientset: c.Client, Kube: kube, Namespace: cluster.DefaultNamespace,
		Resync: 20 * time.Second, DriftCheck: time.Hour}
	// The cache's informers start with their first read, as the in-cluster
	// controller's did long ago.
	for _, list := range []client.ObjectList{&v1alpha1.PackageList{}, &corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{}} {
		if err := mgr.GetClient().List(ctx, list, client.InNamespace(cluster.DefaultNamespace)); err != nil {
			t.Fatal(err)
		}
	}
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	start := time.Now()
	for range 2 {
		wg.Go(func() {
			for name := range work {
				res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cluster.DefaultNamespace, Name: name}})
				if err != nil || res.RequeueAfter != r.Resync {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s: %+v, %v", name, res, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	t.Logf("TIMING unchanged resync of %d Packages (the controller's Reconciler and cache, 2 workers): %.2fs [budget 2s]", len(names), time.Since(start).Seconds())
	if len(failed) > 0 {
		slices.Sort(failed)
		t.Fatalf("resync: %s", strings.Join(failed, "; "))
	}
}

// imagesPackage is a package of k one-layer images (each its own
// repository, docker.io/scale/img-NNN-K:1.0) and one ConfigMap in
// namespace e2e-scale naming them.
func imagesPackage(ctx context.Context, t *testing.T, name string, k int, priv *key.Private) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	var imgs, data strings.Builder
	num := strings.TrimPrefix(name, "e2e-scale-")
	for j := range k {
		sub := fmt.Sprintf("img%d", j)
		layoutTagged(ctx, t, filepath.Join(dir, sub), "1.0", []byte(name+" image "+sub), mkimg.Options{Path: "bin"})
		ref := fmt.Sprintf("docker.io/scale/img-%s-%d:1.0", num, j)
		fmt.Fprintf(&imgs, "      - {ref: %s, layout: %s/images}\n", ref, sub)
		fmt.Fprintf(&data, "  image%d: %s\n", j, ref)
	}
	cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata:\n%s", name, data.String())
	if err := os.WriteFile(filepath.Join(dir, "m", "cm.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\ncomponents:\n  - name: c\n    images:\n%s    manifests:\n      - {name: m, namespace: e2e-scale, files: [m]}\n", name, imgs.String())
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

// httpGet is the body of a 200 answer to GET url.
func httpGet(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %.200s", url, resp.StatusCode, err, body)
	}
	return string(body)
}
