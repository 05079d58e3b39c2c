package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/agent"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/e2e/internal/standin"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// TestThirdPartyCharts deploys each chart of thirdparty.Charts — real
// charts as their projects publish them — with ferry, one after another,
// each into its own namespace, then removes it. The real images cannot be
// pulled, so each image the rendered chart names is a stand-in under the
// chart's own reference (e2e/internal/standin plans it from the rendered
// objects: tiny at every path the chart runs, serving the ports its probes,
// Services and webhooks use, or exiting 0 in Jobs and init containers).
//
// Checked, per chart: the package (chart, values, stand-ins) is created,
// signed and deployed (the controller's helm install waits for every Pod to
// be Ready and every hook Job to complete); every container of every Pod
// seen in the namespace, hooks' included, runs its image from the in-cluster
// registry by the digest the package recorded; the webhooks the chart
// registers got the stand-in's caBundle and answer (a namespace is created
// through them: gatekeeper's failurePolicy is Fail); after `remove`, no
// object the chart renders (templates, hooks, CRDs) is left, no Helm
// release Secret, nothing in the namespace but what Kubernetes puts in every
// namespace (ferry's copy of its registry pull secret is gone too: no other
// package installs there), and the namespace is deleted.
func TestThirdPartyCharts(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 20*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	tiny := c.Tiny(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	for _, ch := range thirdparty.Charts {
		t.Run(ch.Name, func(t *testing.T) {
			start := time.Now()
			ct := &chartTest{c: c, ch: ch, ns: ch.Name, pkg: "e2e-" + ch.Name, dyn: dyn, disc: disc, mapper: mapper}
			ct.run(ctx, t, tiny, priv, pub)
			t.Logf("TIMING %s: %.1fs in all", ch.Name, time.Since(start).Seconds())
		})
	}
}

type chartTest struct {
	c      *harness.Cluster
	ch     thirdparty.Chart
	ns     string // the release's namespace
	pkg    string // the package's name
	dyn    dynamic.Interface
	disc   discovery.DiscoveryInterface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func (ct *chartTest) run(ctx context.Context, t *testing.T, tiny []byte, priv *key.Private, pub *artifact.PublicKey) {
	c := ct.c
	start := time.Now()
	pkgPath, stream, plans := ct.makePackage(ctx, t, tiny, priv)
	t.Logf("TIMING %s: rendered, %d stand-in images built, package created and signed in %.1fs", ct.ch.Name, len(plans), time.Since(start).Seconds())
	r, err := artifact.Open(ctx, pkgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.cleanUp(stream) })

	pods := watchPods(ctx, t, c, ct.ns)
	made := ct.startRuntimeSecret(ctx)
	start = time.Now()
	rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}, Values: ct.ch.Values, Timeout: 4 * time.Minute})
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, podReport(ctx, c, ct.ns))
	}
	if err := <-made; err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING %s: deploy (verify, push %d bytes, helm install --wait --atomic) %.1fs", ct.ch.Name, rec.BytesPushed, time.Since(start).Seconds())
	if len(rec.Releases) != 1 || rec.Releases[0].Namespace != ct.ns || rec.Releases[0].Name != ct.ch.Name {
		t.Fatalf("releases %+v", rec.Releases)
	}

	// Every Pod is Ready (Helm waited), from the in-cluster registry by digest.
	want := map[string]string{} // rewritten image → digest
	images := agent.Images{}
	if err := images.Add(r.Config()); err != nil {
		t.Fatal(err)
	}
	rw := &agent.Rewriter{Registry: cluster.RegistryHost(cluster.DefaultNodePort), Images: images, RequireKnown: true}
	for _, comp := range r.Config().Components {
		for _, img := range comp.Images {
			to, err := rw.Rewrite(img.Ref)
			if err != nil {
				t.Fatal(err)
			}
			want[to] = img.Digest.String()
		}
	}
	// Helm's wait passes a DaemonSet whose maxUnavailable covers all its
	// nodes (metallb's, on one node) before its Pods are Ready: wait here.
	var ready, late []string
	err = harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		live, err := c.Client.CoreV1().Pods(ct.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready = nil
		all := true
		for _, p := range live.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.DeletionTimestamp != nil {
				continue
			}
			ok := len(p.Status.ContainerStatuses) == len(p.Spec.Containers)
			for _, s := range p.Status.ContainerStatuses {
				ok = ok && s.Ready
			}
			if !ok {
				all = false
				if !slices.Contains(late, p.Name) {
					late = append(late, p.Name)
				}
				continue
			}
			ready = append(ready, p.Name)
			spec := map[string]string{}
			for _, cs := range p.Spec.Containers {
				spec[cs.Name] = cs.Image
			}
			for _, s := range p.Status.ContainerStatuses {
				if d := want[spec[s.Name]]; d == "" || !strings.HasSuffix(s.ImageID, d) {
					return false, fmt.Errorf("pod %s: container %s runs %s (%s), not an image of the package by digest", p.Name, s.Name, spec[s.Name], s.ImageID)
				}
			}
		}
		return all && len(ready) > 0, nil
	})
	if err != nil {
		t.Fatalf("pods after the deploy: %v\n%s", err, podReport(ctx, c, ct.ns))
	}
	if len(late) > 0 {
		t.Logf("not Ready yet when Helm's wait ended: %s", strings.Join(late, ", "))
	}
	t.Logf("%d pods ready: %s", len(ready), strings.Join(ready, ", "))

	// The webhooks the chart registers: their caBundle is the stand-in's,
	// and they answer (a namespace created goes through them all).
	hooks := ct.checkWebhooks(ctx, t, stream)
	probe := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ct.ns + "-probe"}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a namespace created while %s's webhooks are registered: %v", ct.ch.Name, err)
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if hooks > 0 {
		t.Logf("%d webhooks with the stand-in's caBundle; namespace %s created through them", hooks, probe.Name)
	}

	start = time.Now()
	removed := start
	res, err := removePkg(ctx, c, ct.pkg)
	if err != nil {
		t.Fatalf("remove: %v", err)
	}
	t.Logf("TIMING %s: remove %.1fs (%d images deleted, registry storage %d → %d bytes)", ct.ch.Name, time.Since(start).Seconds(), len(res.Images), res.Storage.Before, res.Storage.After)

	// Every Pod seen, hooks' included, ran images of the package by digest.
	seen := pods.stop()
	var hookPods []string
	for _, p := range seen {
		for _, cs := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			if want[cs.Image] == "" {
				t.Errorf("pod %s: container %s names %s, not an image of the package by digest", p.Name, cs.Name, cs.Image)
			}
		}
		if !slices.Contains(ready, p.Name) {
			hookPods = append(hookPods, p.Name+podTimes(p, removed))
		}
	}
	sort.Strings(hookPods)
	t.Logf("%d pods seen in all, by digest; besides the running ones (hooks, Jobs, replaced pods): %s", len(seen), strings.Join(hookPods, ", "))

	ct.checkNothingLeft(ctx, t, stream)
}

// runtimeSecrets are the Secrets a chart's software creates when it runs,
// which its Pods mount, and which a stand-in does not create: metallb's
// controller creates the speakers' memberlist key, owned by its
// Deployment (so that it goes with it).
var runtimeSecrets = map[string]struct{ name, owner, key string }{
	"metallb": {name: "metallb-memberlist", owner: "metallb-controller", key: "secretkey"},
}

// startRuntimeSecret creates the chart's runtime Secret, if it has one, as
// its software would: as soon as its owner Deployment exists. The channel
// gives the outcome.
func (ct *chartTest) startRuntimeSecret(ctx context.Context) <-chan error {
	out := make(chan error, 1)
	rs, ok := runtimeSecrets[ct.ch.Name]
	if !ok {
		out <- nil
		return out
	}
	go func() {
		out <- harness.PollUntil(ctx, 3*time.Minute, func() (bool, error) {
			d, err := ct.c.Client.AppsV1().Deployments(ct.ns).Get(ctx, rs.owner, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			sec := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: rs.name, Namespace: ct.ns, OwnerReferences: []metav1.OwnerReference{
					{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID},
				}},
				Data: map[string][]byte{rs.key: []byte("c3RhbmQtaW4ta2V5LTEyMzQ1Ng")},
			}
			_, err = ct.c.Client.CoreV1().Secrets(ct.ns).Create(ctx, sec, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("%s's runtime secret %s: %w", ct.ch.Name, rs.name, err)
			}
			return true, nil
		})
	}()
	return out
}

// makePackage renders the chart, builds its stand-in images into an OCI
// layout, writes the definition and creates the signed package.
func (ct *chartTest) makePackage(ctx context.Context, t *testing.T, tiny []byte, priv *key.Private) (string, []byte, map[string]*standin.Image) {
	t.Helper()
	dir := t.TempDir()
	chartDir := ct.ch.Copy(t, dir)
	stream, err := standin.Render(chartDir, ct.ch.Name, ct.ns, ct.ch.Values, thirdparty.KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := standin.Plan(stream, ct.ns, "/"+mkimg.DefaultPath)
	if err != nil {
		t.Fatal(err)
	}
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, ref := range standin.Refs(plans) {
		plan := plans[ref]
		cfg, err := json.Marshal(plan.Config)
		if err != nil {
			t.Fatal(err)
		}
		opts := mkimg.Options{Links: plan.Paths, Files: map[string][]byte{standin.ConfigPath: cfg}}
		if plan.NonRoot {
			opts.User = "65532" // distroless's nonroot, as most of these projects' images
		}
		img, err := mkimg.New(tiny, opts)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if err := oras.CopyGraph(ctx, img, store, img.Manifest, oras.DefaultCopyGraphOptions); err != nil {
			t.Fatal(err)
		}
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, fmt.Sprintf("      - {ref: %q, layout: images, tag: %q}", named.String(), img.Manifest.Digest))
		t.Logf("stand-in %s: %s, at %v, %d roles", named, img.Manifest.Digest, append([]string{"/" + mkimg.DefaultPath}, plan.Paths...), len(plan.Config.Roles))
	}
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: %s, version: %s}
platforms: [linux/%s]
components:
  - name: %s
    images:
%s
    charts:
      - {path: %s, namespace: %s, releaseName: %s}
`, ct.pkg, strings.TrimPrefix(ct.ch.Version, "v"), runtime.GOARCH, ct.ch.Name, strings.Join(refs, "\n"), ct.ch.Name, ct.ns, ct.ch.Name)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), ct.pkg+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, Format: artifact.FormatTar, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg, stream, plans
}

// renderedObject is an object of the rendered chart and where the API
// serves it.
type renderedObject struct {
	standin.Object
	res schema.GroupVersionResource
}

// objects lists the rendered chart's objects with their resources.
func (ct *chartTest) objects(t *testing.T, stream []byte) []renderedObject {
	t.Helper()
	ct.mapper.Reset()
	var out []renderedObject
	var mapErr error
	objs, err := standin.Objects(stream, ct.ns, func(apiVersion, kind string) bool {
		m, err := ct.mapping(apiVersion, kind)
		if err != nil {
			mapErr = err
			return true
		}
		return m.Scope.Name() == meta.RESTScopeNameNamespace
	})
	if err != nil {
		t.Fatal(err)
	}
	if mapErr != nil {
		t.Fatal(mapErr)
	}
	for _, o := range objs {
		m, _ := ct.mapping(o.APIVersion, o.Kind)
		out = append(out, renderedObject{o, m.Resource})
	}
	return out
}

func (ct *chartTest) mapping(apiVersion, kind string) (*meta.RESTMapping, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	return ct.mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
}

// checkWebhooks waits until every webhook the chart registers towards a
// Service has a caBundle, and returns how many there are.
func (ct *chartTest) checkWebhooks(ctx context.Context, t *testing.T, stream []byte) int {
	t.Helper()
	n := 0
	for _, o := range ct.objects(t, stream) {
		if o.Kind != "ValidatingWebhookConfiguration" && o.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		var missing []string
		count := 0
		err := harness.PollUntil(ctx, time.Minute, func() (bool, error) {
			u, err := ct.dyn.Resource(o.res).Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			missing, count = nil, 0
			hooks, _ := u.Object["webhooks"].([]any)
			for _, h := range hooks {
				h, _ := h.(map[string]any)
				cc, _ := h["clientConfig"].(map[string]any)
				if cc["service"] == nil {
					continue
				}
				count++
				if s, _ := cc["caBundle"].(string); s == "" {
					missing = append(missing, fmt.Sprint(h["name"]))
				}
			}
			return len(missing) == 0, nil
		})
		if err != nil {
			t.Fatalf("%s: webhooks without a caBundle %v: %v\n%s", o, missing, err, podReport(ctx, ct.c, ct.ns))
		}
		n += count
	}
	return n
}

// checkNothingLeft checks, after remove, that no object the chart renders
// is left, nor a Helm release Secret, nor anything in the namespace but
// what every namespace holds; then deletes the namespace and waits until
// it is gone.
func (ct *chartTest) checkNothingLeft(ctx context.Context, t *testing.T, stream []byte) {
	t.Helper()
	objs := ct.objects(t, stream)
	kinds := map[string]int{}
	keep := keptObjects(t, stream)
	for _, o := range objs {
		if keep[o.Kind+"/"+o.Name] {
			// The chart asks Helm to keep it (helm.sh/resource-policy:
			// keep); its own post-delete hook deletes it, which a
			// stand-in does not. It goes with the namespace.
			t.Logf("after remove, %s is kept by the chart's resource policy", o)
			continue
		}
		var err error
		if o.Namespace == "" {
			_, err = ct.dyn.Resource(o.res).Get(ctx, o.Name, metav1.GetOptions{})
		} else {
			_, err = ct.dyn.Resource(o.res).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		}
		if !apierrors.IsNotFound(err) {
			t.Errorf("after remove, %s is still there (%v)", o, err)
		}
		kinds[o.Kind]++
	}
	var summary []string
	for k, n := range kinds {
		summary = append(summary, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(summary)
	t.Logf("after remove, none of the chart's %d objects is left: %s", len(objs), strings.Join(summary, ", "))

	secrets, err := ct.c.Client.CoreV1().Secrets(ct.ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		t.Errorf("after remove, Helm's release Secret %s is still there", s.Name)
	}

	// Anything else in the namespace: every listable namespaced resource.
	lists, err := ct.disc.ServerPreferredNamespacedResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatal(err)
	}
	swept := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range l.APIResources {
			if !slices.Contains(res.Verbs, "list") || res.Name == "events" {
				continue
			}
			items, err := ct.dyn.Resource(gv.WithResource(res.Name)).Namespace(ct.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			swept++
			for _, it := range items.Items {
				switch {
				case res.Name == "configmaps" && it.GetName() == "kube-root-ca.crt",
					res.Name == "serviceaccounts" && it.GetName() == "default",
					res.Name == "configmaps" && keep["ConfigMap/"+it.GetName()]:
					continue
				}
				t.Errorf("after remove, %s %s/%s is still there", res.Kind, ct.ns, it.GetName())
			}
		}
	}
	t.Logf("after remove, %d namespaced resource types of namespace %s hold nothing but kube-root-ca.crt and the default ServiceAccount", swept, ct.ns)

	start := time.Now()
	if err := ct.c.Client.CoreV1().Namespaces().Delete(ctx, ct.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		_, err := ct.c.Client.CoreV1().Namespaces().Get(ctx, ct.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		ns, _ := ct.c.Client.CoreV1().Namespaces().Get(ctx, ct.ns, metav1.GetOptions{})
		t.Fatalf("namespace %s not deleted: %v (%+v)", ct.ns, err, ns.Status)
	}
	t.Logf("namespace %s deleted in %.1fs", ct.ns, time.Since(start).Seconds())
}

// keptObjects are the rendered objects (kind/name) annotated
// helm.sh/resource-policy: keep.
func keptObjects(t *testing.T, stream []byte) map[string]bool {
	t.Helper()
	keep := map[string]bool{}
	docs := strings.Split(string(stream), "\n---")
	for _, d := range docs {
		if !strings.Contains(d, "helm.sh/resource-policy") {
			continue
		}
		objs, err := standin.Objects([]byte(d), "", func(string, string) bool { return false })
		if err != nil || len(objs) != 1 {
			continue
		}
		if strings.Contains(d, "helm.sh/resource-policy: keep") || strings.Contains(d, `helm.sh/resource-policy: "keep"`) {
			keep[objs[0].Kind+"/"+objs[0].Name] = true
		}
	}
	return keep
}

// cleanUp removes what a failed test may have left: the package, the
// chart's cluster-scoped objects (a webhook whose failurePolicy is Fail
// would stand in every later test's way) and the namespace.
func (ct *chartTest) cleanUp(stream []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, _ = removePkg(ctx, ct.c, ct.pkg)
	ct.mapper.Reset()
	objs, _ := standin.Objects(stream, ct.ns, func(apiVersion, kind string) bool {
		m, err := ct.mapping(apiVersion, kind)
		return err != nil || m.Scope.Name() == meta.RESTScopeNameNamespace
	})
	for _, o := range objs {
		if o.Namespace != "" {
			continue
		}
		if m, err := ct.mapping(o.APIVersion, o.Kind); err == nil {
			_ = ct.dyn.Resource(m.Resource).Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
	}
	_ = ct.c.Client.CoreV1().Namespaces().Delete(ctx, ct.ns, metav1.DeleteOptions{})
}

// podWatch records every Pod of a namespace as last seen.
type podWatch struct {
	mu     sync.Mutex
	pods   map[string]*corev1.Pod
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
}

func watchPods(ctx context.Context, t *testing.T, c *harness.Cluster, ns string) *podWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	pw := &podWatch{pods: map[string]*corev1.Pod{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		// From the API server's cache ("0": a watch from "now" waits up to
		// 3 s for the cache to catch up with etcd, then may end), and a
		// watch that ends is resumed after the last event it gave.
		rv := "0"
		for ctx.Err() == nil {
			w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type == watch.Error {
					rv = "0" // too old to resume: from the cache's state again
					continue
				}
				pw.mu.Lock()
				pw.pods[p.Name] = p
				pw.mu.Unlock()
				rv = p.ResourceVersion
			}
			w.Stop()
		}
	}()
	t.Cleanup(func() { pw.stop() })
	return pw
}

// stop ends the watch and returns every Pod seen.
func (pw *podWatch) stop() []*corev1.Pod {
	pw.once.Do(pw.cancel)
	<-pw.done
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range pw.pods {
		out = append(out, p)
	}
	return out
}

// podTimes tells when a Pod was created and when its last container
// ended, in seconds from t0 (negative: before), as " (+1.0s…+3.0s)".
func podTimes(p *corev1.Pod, t0 time.Time) string {
	var end time.Time
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if s.State.Terminated != nil && s.State.Terminated.FinishedAt.After(end) {
			end = s.State.Terminated.FinishedAt.Time
		}
	}
	out := fmt.Sprintf(" (%+.0fs…", p.CreationTimestamp.Sub(t0).Seconds())
	if !end.IsZero() {
		out += fmt.Sprintf("%+.0fs", end.Sub(t0).Seconds())
	}
	return out + ")"
}

// podReport describes the Pods of ns that are not ready, with their
// containers' states and last log lines: what a failed deploy needs.
func podReport(ctx context.Context, c *harness.Cluster, ns string) string {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		statuses := slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
		for _, s := range statuses {
			if s.Ready || s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
				continue
			}
			fmt.Fprintf(&b, "pod %s container %s: %+v (restarts %d)\n", p.Name, s.Name, s.State, s.RestartCount)
			logs, err := c.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, TailLines: ptrTo(int64(10))}).DoRaw(ctx)
			if err == nil {
				fmt.Fprintf(&b, "  log: %s\n", strings.ReplaceAll(strings.TrimSpace(string(logs)), "\n", "\n  log: "))
			}
		}
		if len(statuses) == 0 {
			fmt.Fprintf(&b, "pod %s: %s %+v\n", p.Name, p.Status.Phase, p.Status.Conditions)
		}
	}
	// What the kubelet and controllers said, but for the routine.
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return b.String() + err.Error()
	}
	for _, e := range events.Items {
		if e.Type == corev1.EventTypeNormal && slices.Contains([]string{"Scheduled", "Pulled", "Created", "Started", "SuccessfulCreate", "ScalingReplicaSet", "Completed"}, e.Reason) {
			continue
		}
		fmt.Fprintf(&b, "event %s %s/%s: %s: %s (%d×, last %s)\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count, e.LastTimestamp.Format(time.TimeOnly))
	}
	return b.String()
}
