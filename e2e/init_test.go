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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// binDir is where `make build` put the binaries init ships (bin/ at the
// repository root); FERRY_BIN_DIR overrides it.
func binDir(t testing.TB) string {
	if d := os.Getenv("FERRY_BIN_DIR"); d != "" {
		return d
	}
	d, err := filepath.Abs(filepath.Join("..", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{inject.RegistryFileName("amd64"), inject.Stage1FileName("amd64")} {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			t.Fatalf("%v: run `make build` first", err)
		}
	}
	return d
}

// TestInit bootstraps the registry on the real cluster from nothing, then
// proves it: pulled by digest through the NodePort, injector gone, pushes
// with the generated credentials (anonymous refused), a pod pulls what was
// pushed; a second init changes nothing; a deleted registry pod comes back.
func TestInit(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	ns := cluster.DefaultNamespace
	bin := binDir(t)
	resetFerry(ctx, t, c) // from an empty cluster, whichever test ran first

	start := time.Now()
	// All of it, as the user waits: the registry's own image is pushed
	// into it while the agent is installed.
	res, installed, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin, Progress: func(s inject.Step) {
		t.Logf("init %-15s %s (%.1fs)", s.Name, s.Detail, s.Took.Seconds())
	}})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("TIMING the agent step: %s", installed.Profile())
	t.Logf("TIMING ferry init from empty: %.1fs [budget 10 s], %d ConfigMaps, %d payload chunks, payload %d bytes (≤ 30 chunks)",
		took.Seconds(), res.ConfigMaps, res.PayloadChunks, res.PayloadSize)
	if !res.Injected || res.PayloadChunks > 30 || took > 60*time.Second {
		t.Errorf("init: injected %v, %d payload chunks (budget 30), %.1fs (budget 60 s)", res.Injected, res.PayloadChunks, took.Seconds())
	}
	if !strings.HasPrefix(res.Image, "127.0.0.1:31999/"+inject.RegistryRepository+"@sha256:") {
		t.Fatalf("registry image %q is not pulled by digest from the NodePort", res.Image)
	}

	// The registry pod runs that image, by digest; no injector object is left.
	pod := registryPod(ctx, t, c)
	if got := pod.Spec.Containers[0].Image; got != res.Image {
		t.Fatalf("registry pod image %s, want %s", got, res.Image)
	}
	if id := pod.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, res.Image[strings.Index(res.Image, "@")+1:]) {
		t.Fatalf("registry pod runs image ID %s, want %s", id, res.Image)
	}
	sel := labels.SelectorFromSet(map[string]string{cluster.LabelComponent: "injector"}).String()
	if cms, _ := c.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sel}); len(cms.Items) != 0 {
		t.Fatalf("%d injector ConfigMaps left", len(cms.Items))
	}
	if pods, _ := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel}); len(pods.Items) != 0 {
		t.Fatalf("%d injector pods left", len(pods.Items))
	}
	if _, err := c.Client.CoreV1().Services(ns).Get(ctx, inject.DefaultName, metav1.GetOptions{}); err == nil {
		t.Fatal("the injector Service is left")
	}

	// Push through the NodePort: anonymous refused, the generated account works.
	secret, err := c.Client.CoreV1().Secrets(ns).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mkimg.New(c.Tiny(t), mkimg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if code := anonymousUpload(ctx, t, res.Registry+"/v2/e2e/tiny/blobs/uploads/"); code != http.StatusUnauthorized {
		t.Fatalf("anonymous push: status %d, want 401", code)
	}
	cred := auth.Credential{Username: string(secret.Data["username"]), Password: string(secret.Data["password"])}
	if err := pushTo(ctx, res.Registry+"/e2e/tiny", img, cred); err != nil {
		t.Fatalf("push with the generated credentials: %v", err)
	}

	// A pod pulls it, with the pull secret init made.
	tns := c.Namespace(t)
	pull, err := c.Client.CoreV1().Secrets(ns).Get(ctx, cluster.PullSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Secrets(tns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.PullSecretName}, Type: pull.Type, Data: pull.Data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := tinyPod("pulled", res.Registry+"/e2e/tiny@"+img.Manifest.Digest.String(), corev1.PullAlways)
	p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: cluster.PullSecretName}}
	if _, err := c.Client.CoreV1().Pods(tns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := harness.WaitPodReady(ctx, c.Client, tns, "pulled"); err != nil {
		t.Fatalf("pod pulling from the in-cluster registry: %v", err)
	}

	// `ferry init` again: nothing to inject, the registry pod untouched.
	start = time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "ferry"), "init", "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
	if err != nil {
		t.Fatalf("second ferry init: %v: %s", err, exitStderr(err))
	}
	t.Logf("TIMING second ferry init (CLI): %.1fs", time.Since(start).Seconds())
	var again inject.InitResult
	if err := json.Unmarshal(out, &again); err != nil || again.Registry != res.Registry || again.Image != res.Image {
		t.Fatalf("second ferry init printed %s (%v)", out, err)
	}
	if again.Injected || registryPod(ctx, t, c).UID != pod.UID {
		t.Fatalf("second init injected again (%v) or replaced the registry pod", again.Injected)
	}

	// Delete the registry pod: the Deployment brings it back from the
	// node's image cache, and init is still content.
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := waitNewRegistryPod(ctx, c, pod.UID); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING registry pod back after deletion: %.1fs", time.Since(start).Seconds())
	if again, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin}); err != nil || again.Injected {
		t.Fatalf("init after the pod came back: injected %v, %v", again != nil && again.Injected, err)
	}
}

// TestInjectorRefusesCorruptChunk changes one byte in one payload ConfigMap:
// the injector refuses to serve and the error says why.
func TestInjectorRefusesCorruptChunk(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 5*time.Minute)
	tns := c.Namespace(t)
	bin := binDir(t)
	node, err := harness.WaitNodeReady(ctx, c.Client, firstNode(ctx, t, c))
	if err != nil {
		t.Fatal(err)
	}
	arch := node.Status.NodeInfo.Architecture
	reg, err := inject.LoadRegistry(bin, arch)
	if err != nil {
		t.Fatal(err)
	}
	stage1, err := inject.LoadStage1(bin, arch)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := inject.BuildImage(ctx, dir, inject.ImageOptions{Arch: arch, Binary: reg}); err != nil {
		t.Fatal(err)
	}
	payload, err := inject.NewPayload(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := inject.NewPlan(inject.Options{Namespace: tns, NodeName: node.Name, Image: c.Image, Arch: arch, Stage1: stage1, Payload: payload, NodePort: 31998})
	if err != nil {
		t.Fatal(err)
	}
	flipped := false
	for i := range plan.ConfigMaps {
		cm := &plan.ConfigMaps[i]
		if cm.Labels[inject.LabelPart] != "payload" {
			continue
		}
		for k, v := range cm.BinaryData {
			v = append([]byte(nil), v...)
			v[len(v)/2] ^= 1
			cm.BinaryData[k] = v
			flipped = true
			break
		}
		break
	}
	if !flipped {
		t.Fatal("no payload chunk to damage")
	}
	err = inject.RunInjector(ctx, c.Client, plan, 2*time.Minute)
	if err == nil || !strings.Contains(err.Error(), "payload digest mismatch") {
		t.Fatalf("injector with a damaged chunk: %v, want a payload digest mismatch", err)
	}
	t.Logf("refused as expected: %v", err)
	if err := inject.DeleteInjector(ctx, c.Client, tns); err != nil {
		t.Fatal(err)
	}
}

// resetFerry deletes ferry's namespace, and so everything init made, and
// waits until it is gone. The finalizers of its Packages are dropped first:
// the controller goes with the namespace and could not act on them.
func resetFerry(ctx context.Context, t *testing.T, c *harness.Cluster) {
	t.Helper()
	ns := cluster.DefaultNamespace
	// The controller first, so that it does not put a finalizer back.
	if err := c.Client.AppsV1().Deployments(ns).Delete(ctx, cluster.ControllerName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := waitNoPods(ctx, c, ns, "app.kubernetes.io/name="+cluster.ControllerName); err != nil {
		t.Fatal(err)
	}
	dropPackageFinalizers(ctx, t, c, ns)
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil {
			err = errors.New("still there")
		}
		return apierrors.IsNotFound(err), err
	}); err != nil {
		t.Fatalf("namespace %s: %v", ns, err)
	}
	waitEarlierNamespaces(ctx, t, c)
}

// waitEarlierNamespaces waits (up to a minute) until the namespaces earlier
// tests made (harness.NamespacePrefix, deleted without waiting) are gone, so that
// a timing taken next is not of a cluster still stopping their Pods — after
// TestMultiNodeS3, ~27 of them on 3 nodes. It only logs when they outlast it.
func waitEarlierNamespaces(ctx context.Context, t *testing.T, c *harness.Cluster) {
	t.Helper()
	start := time.Now()
	err := harness.PollUntil(ctx, time.Minute, func() (bool, error) {
		list, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var left []string
		for _, n := range list.Items {
			if strings.HasPrefix(n.Name, harness.NamespacePrefix) {
				left = append(left, n.Name)
			}
		}
		return len(left) == 0, fmt.Errorf("earlier tests' namespaces %v still there", left)
	})
	switch waited := time.Since(start); {
	case err != nil:
		t.Logf("%v: timings may include their clean-up", err)
	case waited > time.Second:
		t.Logf("waited %.1fs for earlier tests' namespaces to go", waited.Seconds())
	}
}

// waitNoPods waits until no Pod of namespace ns matches selector.
func waitNoPods(ctx context.Context, c *harness.Cluster, ns, selector string) error {
	return harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("pods %s of %s still there", selector, ns)
	})
}

// dropPackageFinalizers lets the Packages of namespace ns go without the
// controller (what they installed stays).
func dropPackageFinalizers(ctx context.Context, t *testing.T, c *harness.Cluster, ns string) {
	t.Helper()
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.PackageList
	if err := pc.List(ctx, &list, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return
		}
		t.Fatal(err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		patch := client.MergeFrom(p.DeepCopy())
		p.Finalizers = nil
		if err := pc.Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}

// forgetPackage deletes Package name and its deploy record without the
// controller acting on it (what it installed stays): the next test starts
// from a state with no trace of it.
func forgetPackage(ctx context.Context, t testing.TB, c *harness.Cluster, name string) {
	t.Helper()
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: name}}
	if err := pc.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := pc.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	st := &rollout.State{Client: c.Client, Namespace: cluster.DefaultNamespace}
	if err := st.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

func firstNode(ctx context.Context, t *testing.T, c *harness.Cluster) string {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	return nodes.Items[0].Name
}

func registryPod(ctx context.Context, t *testing.T, c *harness.Cluster) *corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(map[string]string{cluster.LabelName: cluster.RegistryName}).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no running registry pod among %d", len(pods.Items))
	return nil
}

func waitNewRegistryPod(ctx context.Context, c *harness.Cluster, old types.UID) error {
	sel := labels.SelectorFromSet(map[string]string{cluster.LabelName: cluster.RegistryName}).String()
	for {
		pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.UID == old || p.DeletionTimestamp != nil {
				continue
			}
			if _, err := harness.WaitPodReady(ctx, c.Client, p.Namespace, p.Name); err != nil {
				return err
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("no new registry pod after the old one was deleted")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// anonymousUpload starts a blob upload without credentials and returns the
// status, retrying while the NodePort is not yet programmed by kube-proxy.
func anonymousUpload(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("POST %s: %v", url, err)
		}
		time.Sleep(time.Second)
	}
}

// pushTo copies img to repo (host/path) with cred, retrying while the
// NodePort is not yet programmed by kube-proxy.
func pushTo(ctx context.Context, repo string, img *mkimg.Image, cred auth.Credential) error {
	dst, err := remote.NewRepository(repo)
	if err != nil {
		return err
	}
	dst.PlainHTTP = true
	dst.Client = &auth.Client{Client: http.DefaultClient, Credential: auth.StaticCredential(dst.Reference.Registry, cred)}
	deadline := time.Now().Add(time.Minute)
	for {
		err = oras.CopyGraph(ctx, img, dst, img.Manifest, oras.DefaultCopyGraphOptions)
		if err == nil || isUnauthorized(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

func isUnauthorized(err error) bool {
	var e *errcode.ErrorResponse
	return errors.As(err, &e) && e.StatusCode == http.StatusUnauthorized
}

// initFerry runs what ferry init runs (install.Init): the registry's
// bootstrap, its image, the agent (whose controller resyncs and checks for
// drift every 20 s here, for TestPackageResource's drift) and the migration.
func initFerry(ctx context.Context, c *harness.Cluster, opts inject.InitOptions) (*inject.InitResult, *install.InstallResult, error) {
	kube := genericclioptions.NewConfigFlags(true)
	kube.KubeConfig = &c.Kubeconfig
	in := &install.Init{Client: c.Client, Config: c.Config, Kube: kube, Registry: opts, Progress: opts.Progress,
		Agent: install.InstallOptions{ControllerResync: 20 * time.Second, ControllerDriftCheck: 20 * time.Second}}
	res, err := in.Run(ctx)
	if err != nil {
		return nil, nil, err
	}
	return res.InitResult, res.Installed, nil
}
