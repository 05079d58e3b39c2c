package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

var (
	argoAppsGVR     = schema.GroupVersionResource{Group: cluster.ArgoGroup, Version: "v1alpha1", Resource: "applications"}
	argoAppSetsGVR  = schema.GroupVersionResource{Group: cluster.ArgoGroup, Version: "v1alpha1", Resource: "applicationsets"}
	argoProjectsGVR = schema.GroupVersionResource{Group: cluster.ArgoGroup, Version: "v1alpha1", Resource: "appprojects"}
)

// TestArgoCD runs Argo CD v3 (built from the Go module proxy, see
// e2e/argocd/go.mod) in the cluster — its application controller, repo
// server, server and ApplicationSet controller, with Debian's Redis —
// deployed by ferry as a package (argocd_pkg_test.go: the images, install.yaml
// adapted to a cluster without DNS), so that its Pods pull from the
// in-cluster registry by digest like any workload. Then a package carrying
// a git repository, an image and an OCI Helm chart is deployed, and what a
// user writes for the connected world is applied unchanged in Argo CD's
// namespace: Applications of the repository (plain manifests; a
// kustomization), of the chart ghcr.io/acme/charts/web 1.0.0, of the chart
// with values from the repository (multi-source, $values), and an
// ApplicationSet with a list generator. The agent points them at the git
// server and the registry (asserted, with the repository Secret it writes
// for the registry), and Argo CD syncs each to Synced and Healthy; the
// Deployment's Pod runs the carried image by digest. A new version of the
// package, the repository's next commit, is reached by every git source;
// a ConfigMap changed by hand is put back (self-heal). Cleanup deletes the
// Argo CD objects while the controllers run, removes the package and
// leaves no argoproj.io CRD. Skipped unless Argo CD is built (make
// e2e-argocd-build); `make e2e-argocd` runs it with FERRY_REQUIRE_ARGOCD=1.
func TestArgoCD(t *testing.T) {
	c := harness.Get(t)
	cache := argoCache(t)
	ctx := timeout(t, 15*time.Minute)
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

	// Argo CD, a package deployed with ferry.
	start := time.Now()
	argo := argoPackage(ctx, t, cache, priv)
	t.Logf("TIMING Argo CD's package made: %.1fs", time.Since(start).Seconds())
	start = time.Now()
	t.Cleanup(func() { removeArgo(t, c, argo) })
	if _, err := deployPkg(ctx, c, argo, deploy.Deploy{Keys: []*artifact.PublicKey{pub}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING Argo CD's package deployed, Ready: %.1fs", time.Since(start).Seconds())
	checkArgoPods(ctx, t, c, res.Registry, argo)
	waitArgoProject(ctx, t, dyn)

	// The GitOps package: a repository, the image its Deployment names, a chart.
	start = time.Now()
	src := argoFleetSource(t)
	fleet := argoFleetPackage(ctx, t, c, priv, src, "1.0.0")
	t.Cleanup(func() {
		if _, err := removePkg(context.Background(), c, "e2e-argo-fleet"); err != nil {
			t.Errorf("remove e2e-argo-fleet: %v", err)
		}
	})
	if _, err := deployPkg(ctx, c, fleet, deploy.Deploy{Keys: []*artifact.PublicKey{pub}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING the GitOps package deployed: %.1fs", time.Since(start).Seconds())
	comp := fleet.Config().Components[0]
	carried, web := comp.Repositories[0], comp.Images[0]

	// What a user writes for the connected world, applied unchanged.
	ns := c.Namespace(t)
	t.Cleanup(func() { deleteArgoObjects(t, dyn) })
	start = time.Now()
	if _, err := c.Client.CoreV1().Secrets(argoNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ghcr-charts", Labels: map[string]string{install.ArgoSecretTypeLabel: "repository"}},
		StringData: map[string]string{"type": "helm", "name": "charts", "url": "ghcr.io/acme/charts", "enableOCI": "true"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dest := map[string]any{"server": "https://kubernetes.default.svc", "namespace": ns}
	auto := map[string]any{"automated": map[string]any{"prune": true, "selfHeal": true}}
	gitSource := func(path string) map[string]any {
		return map[string]any{"repoURL": carried.URL, "targetRevision": "main", "path": path}
	}
	chartSource := func() map[string]any {
		return map[string]any{"repoURL": "ghcr.io/acme/charts", "chart": "web", "targetRevision": "1.0.0"}
	}
	app := func(name string, spec map[string]any) *unstructured.Unstructured {
		spec["project"], spec["destination"], spec["syncPolicy"] = "default", dest, auto
		return createArgo(ctx, t, dyn, argoAppsGVR, "Application", name, spec)
	}
	multiChart := chartSource()
	multiChart["helm"] = map[string]any{"valueFiles": []any{"$values/values/web.yaml"}}
	apps := map[string]*unstructured.Unstructured{
		"plain":     app("plain", map[string]any{"source": gitSource("plain")}),
		"kustomize": app("kustomize", map[string]any{"source": gitSource("kustomize")}),
		"chart":     app("chart", map[string]any{"source": chartSource()}),
		"multi": app("multi", map[string]any{"sources": []any{multiChart,
			map[string]any{"repoURL": carried.URL, "targetRevision": "main", "ref": "values"}}}),
	}
	set := createArgo(ctx, t, dyn, argoAppSetsGVR, "ApplicationSet", "set", map[string]any{
		"generators": []any{map[string]any{"list": map[string]any{"elements": []any{
			map[string]any{"name": "one"}, map[string]any{"name": "two"},
		}}}},
		"template": map[string]any{
			"metadata": map[string]any{"name": "set-{{name}}"},
			"spec":     map[string]any{"project": "default", "source": gitSource("set/{{name}}"), "destination": dest, "syncPolicy": auto},
		},
	})

	// What the agent made of them: nothing points outside the cluster.
	gitURL, chartURL := installed.Git+"/"+carried.Key+".git", registry+"/acme/charts"
	for _, f := range []struct {
		obj  *unstructured.Unstructured
		path []any
		want string
	}{
		{apps["plain"], []any{"spec", "source", "repoURL"}, gitURL},
		{apps["plain"], []any{"spec", "source", "targetRevision"}, "main"},
		{apps["kustomize"], []any{"spec", "source", "repoURL"}, gitURL},
		{apps["chart"], []any{"spec", "source", "repoURL"}, chartURL},
		{apps["chart"], []any{"spec", "source", "targetRevision"}, "1.0.0"},
		{apps["multi"], []any{"spec", "sources", 0, "repoURL"}, chartURL},
		{apps["multi"], []any{"spec", "sources", 1, "repoURL"}, gitURL},
		{apps["multi"], []any{"spec", "sources", 1, "targetRevision"}, "main"},
		{set, []any{"spec", "template", "spec", "source", "repoURL"}, gitURL},
		{set, []any{"spec", "template", "spec", "source", "targetRevision"}, "main"},
	} {
		if got := argoField(f.obj.Object, f.path...); got != f.want {
			t.Errorf("%s %s: %s = %q, want %q", f.obj.GetKind(), f.obj.GetName(), argoPath(f.path), got, f.want)
		}
	}
	checkArgoRegistrySecret(ctx, t, c, chartURL)
	t.Logf("rewritten: git %s at %s, chart %s", gitURL, carried.Commit, chartURL)

	// Argo CD syncs each: Synced and Healthy, at the carried revisions.
	for name, revs := range map[string][]string{
		"plain": {carried.Commit}, "kustomize": {carried.Commit}, "chart": {"1.0.0"},
		"multi": {"1.0.0", carried.Commit}, "set-one": {carried.Commit}, "set-two": {carried.Commit},
	} {
		got := waitArgoApp(ctx, t, dyn, name, revs)
		if strings.HasPrefix(name, "set-") {
			if u := argoField(got.Object, "spec", "source", "repoURL"); u != gitURL {
				t.Errorf("Application %s (of the ApplicationSet): repoURL %q, want %q", name, u, gitURL)
			}
		}
	}
	t.Logf("TIMING Applications Synced and Healthy: %.1fs", time.Since(start).Seconds())
	for name, want := range map[string]map[string]string{
		"plain": {"version": "1"}, "kust-app": {"from": "kustomize"}, "chart-web": {"message": "default"},
		"multi-web": {"message": "from-git"}, "set-one": {"element": "one"}, "set-two": {"element": "two"},
	} {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("ConfigMap %s: %v", name, err)
			continue
		}
		for k, v := range want {
			if cm.Data[k] != v {
				t.Errorf("ConfigMap %s: %s = %q, want %q", name, k, cm.Data[k], v)
			}
		}
	}

	// The Deployment's Pod, pulled by digest from the in-cluster registry.
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

	// A new version of the package carries the repository's next commit:
	// every git source reaches it.
	start = time.Now()
	argoNextCommit(t, src, "2")
	fleet2 := argoFleetPackage(ctx, t, c, priv, src, "1.1.0")
	if _, err := deployPkg(ctx, c, fleet2, deploy.Deploy{Keys: []*artifact.PublicKey{pub}}); err != nil {
		t.Fatal(err)
	}
	next := fleet2.Config().Components[0].Repositories[0].Commit
	if next == carried.Commit {
		t.Fatalf("1.1.0 carries the same commit %s", next)
	}
	// The sources follow main, which the git server now leads to 1.1.0's
	// commit; Argo CD sees it at its next refresh (up to its 3-minute
	// reconciliation plus its 3-minute revision cache), or at once on a
	// hard refresh, as a user asks for one.
	list, err := dyn.Resource(argoAppsGVR).Namespace(argoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range list.Items {
		patch := []byte(`{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"hard"}}}`)
		if _, err := dyn.Resource(argoAppsGVR).Namespace(argoNamespace).Patch(ctx, app.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, revs := range map[string][]string{
		"plain": {next}, "kustomize": {next}, "multi": {"1.0.0", next}, "set-one": {next}, "set-two": {next},
	} {
		waitArgoApp(ctx, t, dyn, name, revs)
	}
	if cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "plain", metav1.GetOptions{}); err != nil || cm.Data["version"] != "2" {
		t.Fatalf("ConfigMap plain after 1.1.0: %v %v, want version 2", cm.Data, err)
	}
	t.Logf("TIMING 1.1.0's commit %s Synced: %.1fs", next, time.Since(start).Seconds())

	// Self-heal: a ConfigMap changed by hand is put back.
	start = time.Now()
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["version"] = "drifted"
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := harness.PollUntil(ctx, 3*time.Minute, func() (bool, error) {
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "plain", metav1.GetOptions{})
		return err == nil && cm.Data["version"] == "2", nil
	}); err != nil {
		t.Fatalf("ConfigMap plain not put back by self-heal: %v", err)
	}
	t.Logf("TIMING self-heal put ConfigMap plain back: %.1fs", time.Since(start).Seconds())
	t.Logf("TIMING TestArgoCD up to its cleanup: %.1fs", time.Since(t0).Seconds())
}

// checkArgoPods checks that every Pod of Argo CD runs, Ready, from the
// in-cluster registry by the digest of an image its package carries.
func checkArgoPods(ctx context.Context, t *testing.T, c *harness.Cluster, registry string, argo *artifact.Reader) {
	t.Helper()
	var digests []string
	for _, img := range argo.Config().Components[0].Images {
		digests = append(digests, img.Digest.String())
	}
	pods, err := c.Client.CoreV1().Pods(argoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("Pod %s: %s", p.Name, p.Status.Phase)
		}
		for _, ct := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			name, dgst, _ := strings.Cut(ct.Image, "@")
			if !strings.HasPrefix(name, registry+"/") || !slices.Contains(digests, dgst) {
				t.Errorf("Pod %s container %s runs %s, want %s/…@ one of %v", p.Name, ct.Name, ct.Image, registry, digests)
			}
		}
	}
	if len(pods.Items) != 5 {
		t.Errorf("Argo CD's Pods: %v, want 5 (server, repo server, Redis, application and ApplicationSet controllers)", names)
	}
	t.Logf("Argo CD's Pods %v run %v from %s", names, digests, registry)
}

// waitArgoProject waits for the project "default", which argocd-server
// makes when it starts and every Application here names.
func waitArgoProject(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	if err := harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		_, err := dyn.Resource(argoProjectsGVR).Namespace(argoNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("AppProject default not made by argocd-server: %v", err)
	}
}

// checkArgoRegistrySecret checks the Argo CD repository Secret the agent
// writes in Argo CD's namespace for the chart's rewritten URL: an OCI Helm
// repository over plain HTTP, with the registry's account.
func checkArgoRegistrySecret(ctx context.Context, t *testing.T, c *harness.Cluster, url string) {
	t.Helper()
	l, err := c.Client.CoreV1().Secrets(argoNamespace).List(ctx, metav1.ListOptions{LabelSelector: install.ArgoSecretTypeLabel + "=repository"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if string(s.Data["url"]) != url {
			continue
		}
		for k, want := range map[string]string{"type": "helm", "enableOCI": "true", "insecureOCIForceHttp": "true"} {
			if got := string(s.Data[k]); got != want {
				t.Errorf("repository Secret %s: %s = %q, want %q", s.Name, k, got, want)
			}
		}
		if len(s.Data["username"]) == 0 || len(s.Data["password"]) == 0 {
			t.Errorf("repository Secret %s: no registry account (keys %v)", s.Name, keysOf(s.Data))
		}
		t.Logf("repository Secret %s for %s", s.Name, url)
		return
	}
	t.Errorf("no Argo CD repository Secret in %s for %s", argoNamespace, url)
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// createArgo creates an Argo CD object of kind with spec in Argo CD's
// namespace and returns it as the API server stored it (after the
// agent's rewrite).
func createArgo(ctx context.Context, t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, kind, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": argoNamespace}, "spec": spec,
	}}
	got, err := dyn.Resource(gvr).Namespace(argoNamespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", kind, name, err)
	}
	return got
}

// waitArgoApp waits until an Application is Synced and Healthy at revs
// (status.sync.revision, or status.sync.revisions for several sources)
// and returns it.
func waitArgoApp(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, revs []string) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	last := "not found"
	for {
		obj, err := dyn.Resource(argoAppsGVR).Namespace(argoNamespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			sync, health := argoField(obj.Object, "status", "sync", "status"), argoField(obj.Object, "status", "health", "status")
			got := []string{argoField(obj.Object, "status", "sync", "revision")}
			if len(revs) > 1 {
				got, _, _ = unstructured.NestedStringSlice(obj.Object, "status", "sync", "revisions")
			}
			if sync == "Synced" && health == "Healthy" && slices.Equal(got, revs) {
				return obj
			}
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			last = fmt.Sprintf("sync %q, health %q, revisions %v, operation %q: %q, conditions %v", sync, health, got,
				argoField(obj.Object, "status", "operationState", "phase"), argoField(obj.Object, "status", "operationState", "message"), conds)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Application %s not Synced and Healthy at %v: %s (%v)", name, revs, last, err)
		case <-time.After(time.Second):
		}
	}
}

// argoField returns the string at path in obj, where a path element is a
// map key (string) or a list index (int); "" if there is none.
func argoField(obj map[string]any, path ...any) string {
	var v any = obj
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return ""
			}
			v = l[k]
		}
	}
	s, _ := v.(string)
	return s
}

func argoPath(path []any) string {
	var parts []string
	for _, p := range path {
		parts = append(parts, fmt.Sprint(p))
	}
	return strings.Join(parts, ".")
}

// deleteArgoObjects deletes the test's ApplicationSet (its Applications
// go with it) and Applications while Argo CD's controllers still run, and
// waits until they are gone.
func deleteArgoObjects(t *testing.T, dyn dynamic.Interface) {
	deleteObjects(t, dyn, argoNamespace, 2*time.Minute, argoAppSetsGVR, argoAppsGVR)
}

// removeArgo removes Argo CD's package (its controllers, RBAC and CRDs go
// with it) and namespace, and checks that no argoproj.io CRD is left.
func removeArgo(t *testing.T, c *harness.Cluster, argo *artifact.Reader) {
	removeController(t, c, argo, argoNamespace, "Argo CD", 3*time.Minute, func(g string) bool { return g == cluster.ArgoGroup })
}
