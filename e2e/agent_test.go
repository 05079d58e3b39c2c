package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// TestAgent proves the admission webhook on the real harness. After init
// (the agent is part of it; a second init is a no-op) and the deploy of a
// signed package holding docker.io/library/app:1.0: a Pod naming that image,
// and app:1.0 in an init container, is rewritten to
// 127.0.0.1:31999/library/app@<recorded digest>, gets the pull secret (copied
// into its namespace) and runs, pulled from the in-cluster registry; an
// ephemeral container is rewritten too; a Pod in a namespace labelled
// ferry.dev/agent=ignore keeps its image. With the agent down, creating a
// Pod is refused by the webhook (never admitted unrewritten), while an
// update that changes no image still passes; init brings the agent back.
func TestAgent(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	bin := binDir(t)
	ns := cluster.DefaultNamespace

	start := time.Now()
	res, installed, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin, Progress: func(s inject.Step) {
		t.Logf("init %-15s %s (%.1fs)", s.Name, s.Detail, s.Took.Seconds())
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING init (agent included; injected %v): %.1fs", res.Injected, time.Since(start).Seconds())
	if !strings.HasPrefix(installed.Image, "127.0.0.1:31999/"+install.Repository+"@sha256:") {
		t.Fatalf("agent image %q is not by digest in the in-cluster registry", installed.Image)
	}
	agentPod := runningAgentPod(ctx, t, c)
	if agentPod.Spec.Containers[0].Image != installed.Image || !strings.HasSuffix(agentPod.Status.ContainerStatuses[0].ImageID, installed.Image[strings.Index(installed.Image, "@")+1:]) {
		t.Fatalf("agent pod runs %s (%s), want %s", agentPod.Spec.Containers[0].Image, agentPod.Status.ContainerStatuses[0].ImageID, installed.Image)
	}
	logAgentImageSize(ctx, t, c, installed.Image)

	start = time.Now()
	again, againInstalled, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin, Progress: func(s inject.Step) {
		t.Logf("second init %-15s %s (%.1fs)", s.Name, s.Detail, s.Took.Seconds())
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING second init: %.1fs", time.Since(start).Seconds())
	if again.Injected || againInstalled.Image != installed.Image || runningAgentPod(ctx, t, c).UID != agentPod.UID {
		t.Fatalf("second init changed something: injected %v, agent %s, pod replaced %v", again.Injected, againInstalled.Image, runningAgentPod(ctx, t, c).UID != agentPod.UID)
	}

	// Deploy a signed package holding docker.io/library/app:1.0.
	r, pub := agentPackage(ctx, t, c)
	rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}})
	if err != nil {
		t.Fatal(err)
	}
	st := &rollout.State{Client: c.Client, Namespace: ns}
	t.Cleanup(func() { _ = st.Delete(context.Background(), rec.Name) })
	want := res.Registry + "/library/app@" + r.Config().Components[0].Images[0].Digest.String()

	// A Pod created right after: rewritten, pull secret, Runs.
	apps := c.Namespace(t)
	p := tinyPod("app", "docker.io/library/app:1.0", corev1.PullAlways) // pulled now, with the copied secret
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "app:1.0", Args: []string{"echo", "init"}}}
	start = time.Now()
	created, err := c.Client.CoreV1().Pods(apps).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING first Pod create in a new namespace (rewrite + pull secret copy): %s", time.Since(start).Round(time.Millisecond))
	if got := []string{created.Spec.Containers[0].Image, created.Spec.InitContainers[0].Image}; got[0] != want || got[1] != want {
		t.Fatalf("pod images %v, want %s for both", got, want)
	}
	if len(created.Spec.ImagePullSecrets) != 1 || created.Spec.ImagePullSecrets[0].Name != cluster.PullSecretName {
		t.Fatalf("pull secrets %v", created.Spec.ImagePullSecrets)
	}
	if s, err := c.Client.CoreV1().Secrets(apps).Get(ctx, cluster.PullSecretName, metav1.GetOptions{}); err != nil || s.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("pull secret in %s: %v", apps, err)
	}
	running, err := harness.WaitPodReady(ctx, c.Client, apps, "app")
	if err != nil {
		t.Fatalf("rewritten pod: %v", err)
	}
	if id := running.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, want[strings.Index(want, "@")+1:]) {
		t.Fatalf("pod runs image %s, want %s", id, want)
	}
	t.Logf("pod %s/app runs %s (init container too), pulled from the in-cluster registry", apps, want)

	// An ephemeral container (kubectl debug) is rewritten too.
	running.Spec.EphemeralContainers = append(running.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "docker.io/library/app:1.0", Args: []string{"echo", "debug"}},
	})
	debugged, err := c.Client.CoreV1().Pods(apps).UpdateEphemeralContainers(ctx, "app", running, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := debugged.Spec.EphemeralContainers[0].Image; got != want {
		t.Fatalf("ephemeral container image %s, want %s", got, want)
	}

	// An ignored namespace keeps its images.
	ignored, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: harness.NamespacePrefix + "ignored-", Labels: map[string]string{install.IgnoreLabel: install.IgnoreValue},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ignored.Name, metav1.DeleteOptions{})
	})
	waitServiceAccount(ctx, t, c, ignored.Name)
	left, err := c.Client.CoreV1().Pods(ignored.Name).Create(ctx, tinyPod("app", "docker.io/library/app:1.0", corev1.PullNever), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left.Spec.Containers[0].Image != "docker.io/library/app:1.0" || len(left.Spec.ImagePullSecrets) != 0 {
		t.Fatalf("a pod in an ignored namespace was changed: %s, %v", left.Spec.Containers[0].Image, left.Spec.ImagePullSecrets)
	}

	// Admission latency: dry-run creates through the agent and past it.
	through := createLatency(ctx, t, c, apps, "docker.io/library/app:1.0")
	past := createLatency(ctx, t, c, ignored.Name, "docker.io/library/app:1.0")
	t.Logf("TIMING Pod create (dry run, median of %d): %s through the agent, %s in an ignored namespace", len(through), median(through), median(past))

	// The agent down: Pods are refused, not admitted unrewritten.
	restored := false
	t.Cleanup(func() {
		if !restored { // leave the cluster working whatever happened
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin}); err != nil {
				t.Errorf("restore the agent: %v", err)
			}
		}
	})
	scaleAgent(ctx, t, c, 0)
	_, err = c.Client.CoreV1().Pods(apps).Create(ctx, tinyPod("refused", "docker.io/library/app:1.0", corev1.PullIfNotPresent), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "pods.agent.ferry.dev"`) {
		t.Fatalf("pod created with the agent down: %v", err)
	}
	t.Logf("refused as expected: %v", err)
	if _, err := c.Client.CoreV1().Pods(apps).Get(ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused pod exists: %v", err)
	}
	// An update that changes no image does not need the agent.
	patch := []byte(`{"metadata":{"labels":{"e2e":"agent-down"}}}`)
	if _, err := c.Client.CoreV1().Pods(apps).Patch(ctx, "app", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label update with the agent down: %v", err)
	}
	// Nor do ignored namespaces.
	if _, err := c.Client.CoreV1().Pods(ignored.Name).Create(ctx, tinyPod("still", c.Image, corev1.PullNever), metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod in an ignored namespace with the agent down: %v", err)
	}

	// init repairs it.
	start = time.Now()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin}); err != nil {
		t.Fatal(err)
	}
	restored = true
	t.Logf("TIMING init bringing the agent back: %.1fs", time.Since(start).Seconds())
	back, err := c.Client.CoreV1().Pods(apps).Create(ctx, tinyPod("back", "docker.io/library/app:1.0", corev1.PullIfNotPresent), metav1.CreateOptions{})
	if err != nil || back.Spec.Containers[0].Image != want {
		t.Fatalf("pod after init repaired the agent: %v", err)
	}
	if _, err := harness.WaitPodReady(ctx, c.Client, apps, "back"); err != nil {
		t.Fatal(err)
	}
}

// agentPackage makes the signed app package (see appPackage) named
// e2e-agent and returns it open with the key that verifies it.
func agentPackage(ctx context.Context, t *testing.T, c *harness.Cluster) (*artifact.Reader, *artifact.PublicKey) {
	t.Helper()
	pkg, pub := appPackage(ctx, t, c, "e2e-agent")
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return r, pub
}

func agentSelector() string {
	return labels.SelectorFromSet(map[string]string{cluster.LabelName: install.Name}).String()
}

func runningAgentPod(ctx context.Context, t *testing.T, c *harness.Cluster) *corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector()})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no running agent pod among %d", len(pods.Items))
	return nil
}

// scaleAgent sets the agent's replicas and waits until that many pods are
// left (none being deleted).
func scaleAgent(ctx context.Context, t *testing.T, c *harness.Cluster, n int32) {
	t.Helper()
	deps := c.Client.AppsV1().Deployments(cluster.DefaultNamespace)
	scale, err := deps.GetScale(ctx, install.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = n
	if _, err := deps.UpdateScale(ctx, install.Name, scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector()})
		if err != nil {
			t.Fatal(err)
		}
		if int32(len(pods.Items)) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("agent pods: %d, want %d", len(pods.Items), n)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func waitServiceAccount(ctx context.Context, t *testing.T, c *harness.Cluster, ns string) {
	t.Helper()
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsNotFound(err) || ctx.Err() != nil {
			t.Fatalf("service account default in %s: %v", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createLatency times 15 dry-run creates of a Pod naming image in ns, with
// a client that is not rate-limited.
func createLatency(ctx context.Context, t *testing.T, c *harness.Cluster, ns, image string) []time.Duration {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for i := 0; i < 15; i++ {
		p := tinyPod(fmt.Sprintf("dry-%d", i), image, corev1.PullIfNotPresent)
		start := time.Now()
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(100 * time.Microsecond)
}

// logAgentImageSize reports the size of the agent image in the registry.
func logAgentImageSize(ctx context.Context, t *testing.T, c *harness.Cluster, ref string) {
	t.Helper()
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := ref[:strings.Index(ref, "/")]
	repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, auth.Credential{
		Username: string(sec.Data["username"]), Password: string(sec.Data["password"]),
	})}.Repository(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, rc, err := repo.FetchReference(ctx, ref[strings.Index(ref, "@")+1:])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var m ocispec.Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatal(err)
	}
	size := desc.Size + m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	t.Logf("SIZE agent image: %.1f MB (%d layer, %s)", float64(size)/1e6, len(m.Layers), m.Layers[0].MediaType)
}

// TestAgentCommand runs `ferry agent --require-known` as a process against
// the cluster's state (outside a Pod, with --kubeconfig): a Pod naming a
// deployed image is rewritten, one naming an image in no deployed package is
// refused; SIGTERM stops it cleanly.
func TestAgentCommand(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 5*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	r, pub := agentPackage(ctx, t, c)
	rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}})
	if err != nil {
		t.Fatal(err)
	}
	st := &rollout.State{Client: c.Client, Namespace: cluster.DefaultNamespace}
	t.Cleanup(func() { _ = st.Delete(context.Background(), rec.Name) })

	dir := t.TempDir()
	certFile, keyFile, client, err := fixture.SelfSignedLoopback(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir(t), "ferry"), "agent", "--kubeconfig", c.Kubeconfig, "--require-known",
		"--addr", addr, "--tls-cert", certFile, "--tls-key", keyFile)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := "https://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ferry agent not ready: %v; %s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	review := func(image string) *admissionv1.AdmissionResponse {
		t.Helper()
		raw, _ := json.Marshal(tinyPod("p", image, corev1.PullIfNotPresent))
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Namespace: "apps", Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: raw}, DryRun: ptrTo(true)},
		})
		resp, err := client.Post(base+"/mutate", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
			t.Fatalf("review: %v", err)
		}
		return out.Response
	}
	want := cluster.RegistryHost(cluster.DefaultNodePort) + "/library/app@" + r.Config().Components[0].Images[0].Digest.String()
	if resp := review("docker.io/library/app:1.0"); !resp.Allowed || !strings.Contains(string(resp.Patch), want) {
		t.Fatalf("deployed image: allowed %v, patch %s, want %s", resp.Allowed, resp.Patch, want)
	}
	if resp := review("docker.io/library/unknown:1.0"); resp.Allowed || !strings.Contains(resp.Result.Message, "in no deployed package") {
		t.Fatalf("unknown image under --require-known: %+v", resp)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ferry agent after SIGTERM: %v; %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop in the log: %s", stderr.String())
	}
	t.Logf("ferry agent stopped %.1fs after SIGTERM (drain delay included); log:\n%s", time.Since(start).Seconds(), stderr.String())
}

func ptrTo[T any](v T) *T { return &v }
