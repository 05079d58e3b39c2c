package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// previousRelease is the bin folder of the ferry an upgrade starts from:
// the commit e2e/previous-release pins, built by e2e/cluster/build.sh.
func previousRelease(t *testing.T) (string, string) {
	t.Helper()
	b, err := os.ReadFile("previous-release")
	if err != nil {
		t.Fatal(err)
	}
	var commit string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			commit = l
			break
		}
	}
	cache := os.Getenv("FERRY_E2E_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			base = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		cache = filepath.Join(base, "ferry-e2e")
	}
	dir := filepath.Join(cache, "previous", commit, "bin")
	if _, err := os.Stat(filepath.Join(dir, "ferry-full")); err != nil {
		t.Fatalf("the previous release %s is not built (e2e/cluster/build.sh builds it): %v", commit, err)
	}
	return dir, commit
}

// cli runs a ferry binary with args (COSIGN_PASSWORD=pw) and returns its
// standard output.
func cli(ctx context.Context, t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=pw")
	out, err := cmd.Output()
	t.Logf("%s %s: %.1fs", filepath.Base(filepath.Dir(filepath.Dir(bin)))+"/"+filepath.Base(bin), args[0], time.Since(start).Seconds())
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(exitStderr(err)))
	}
	return string(out), nil
}

// TestFreshUpgrade: a cluster of three nodes set up by the previous
// release, which deployed two packages it made, is upgraded in place by
// this ferry's init while Pods are created on every node, each pulling
// anew through the agent's rewrite: none is refused at admission, no pull
// fails, the registry's content and every Package are kept. Then the
// registry's node is drained (kubectl drain's way) while Pods are created
// on the other nodes: every one starts.
func TestFreshUpgrade(t *testing.T) {
	c := harness.Workstation(t)
	ctx := timeout(t, 15*time.Minute)
	up := upgradeUnderLoad(ctx, t, c, nil)

	// An older ferry's init on the upgraded cluster, and a refused
	// downgrade (e2e/upgrade_formats_test.go), then this ferry's again.
	if !t.Run("downgrade", func(t *testing.T) { upgradeDowngrade(ctx, t, c, up.prev) }) {
		t.FailNow()
	}

	t.Run("drain the registry's node", func(t *testing.T) {
		drainUnderLoad(ctx, t, c, up.refs["e2e-up-a"], "filesystem")
	})
}

// upgraded is what upgradeUnderLoad leaves: the previous release's ferry
// and the images of the packages it deployed.
type upgraded struct {
	prev string
	refs map[string]string
}

// upgradeUnderLoad sets the cluster up with the previous release (init
// with initArgs, two packages it made and deployed), then runs this
// ferry's init with the same arguments while Pods are created on every
// node, each pulling anew: it counts refused admissions, failed pulls and
// Pods never started (each an error), and checks that this ferry runs
// the registry and the agent and that every Package, record and image is
// kept.
func upgradeUnderLoad(ctx context.Context, t *testing.T, c *harness.Cluster, initArgs []string) upgraded {
	t.Helper()
	nodes := readyNodes(ctx, t, c)
	prevDir, commit := previousRelease(t)
	prev := filepath.Join(prevDir, "ferry")
	kc := []string{"--kubeconfig", c.Kubeconfig}
	work := t.TempDir()

	kp, err := key.Generate([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile := filepath.Join(work, "k.key"), filepath.Join(work, "k.pub")
	if err := kp.WriteFiles(keyFile, pubFile); err != nil {
		t.Fatal(err)
	}

	// Day one, with the previous release: init, two packages it made.
	if _, err := cli(ctx, t, prev, append(append([]string{"init", "--key", pubFile}, initArgs...), kc...)...); err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{"e2e-up-a": "docker.io/library/app-a:1.0", "e2e-up-b": "docker.io/library/app-b:1.0"}
	for _, name := range []string{"e2e-up-a", "e2e-up-b"} {
		dir := filepath.Join(work, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		layoutImage(ctx, t, dir, c.Tiny(t), mkimg.Options{Labels: map[string]string{"e2e": name}})
		def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: app\n    images:\n      - {ref: %s, layout: images}\n", name, runtime.GOARCH, refs[name])
		if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Join(work, name+".tar.zst")
		if _, err := cli(ctx, t, prev, "package", "create", dir, "-f", pkg, "--sign-key", keyFile, "--sbom=false"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli(ctx, t, prev, append([]string{"deploy", pkg, "--key", pubFile}, kc...)...); err != nil {
			t.Fatal(err)
		}
	}
	before := packagesReady(ctx, t, c)
	records := recordSecrets(ctx, t, c)
	t.Logf("set up by the previous release (%s): Packages %v, %d records", commit[:12], before, len(records))

	// The load: a Pod every 0.7 s on each node in turn, each pulling anew.
	ns := c.Namespace(t)
	load := startPodLoad(ctx, t, c, ns, nodes, refs["e2e-up-a"], 700*time.Millisecond)
	time.Sleep(10 * time.Second)

	var res struct {
		Image   string  `json:"image"`
		Agent   string  `json:"agent"`
		Seconds float64 `json:"seconds"`
		Steps   []struct {
			Name    string  `json:"name"`
			Detail  string  `json:"detail"`
			Seconds float64 `json:"seconds"`
		} `json:"steps"`
	}
	start := time.Now()
	if err := ferryJSON(ctx, t, c, &res, append([]string{"init"}, initArgs...)...); err != nil {
		load.Stop(ctx, t, time.Minute)
		t.Fatal(err)
	}
	took := time.Since(start)
	for _, s := range res.Steps {
		if s.Name == "check registry" || s.Name == "registry" || s.Name == "injector" || s.Name == "storage" {
			t.Logf("init step %s (%.1fs): %s", s.Name, s.Seconds, s.Detail)
		}
	}
	time.Sleep(15 * time.Second)
	n := load.Stop(ctx, t, 2*time.Minute)
	storage := "filesystem"
	if slices.Contains(initArgs, "--storage") {
		storage = "S3"
	}
	t.Logf("COUNT upgrade in place (%s storage, init %.1fs): %s", storage, took.Seconds(), n)
	for _, f := range n.Failures {
		t.Errorf("through the upgrade: %s", f)
	}
	if n.Started < 20 {
		t.Errorf("only %d Pods started through the upgrade", n.Started)
	}

	// This ferry runs everything now; nothing was lost.
	reg, err := c.Client.AppsV1().Deployments(cluster.DefaultNamespace).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Spec.Template.Spec.Containers[0].Image; got != res.Image {
		t.Errorf("the registry runs %s, init says %s", got, res.Image)
	}
	agent, err := c.Client.AppsV1().Deployments(cluster.DefaultNamespace).Get(ctx, install.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := agent.Spec.Template.Spec.Containers[0].Image; got != res.Agent || agent.Status.ReadyReplicas != install.AgentReplicas {
		t.Errorf("the agent runs %s (%d ready), init says %s", got, agent.Status.ReadyReplicas, res.Agent)
	}
	after := packagesReady(ctx, t, c)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("Packages after the upgrade %v, before %v", after, before)
	}
	if got := recordSecrets(ctx, t, c); fmt.Sprint(got) != fmt.Sprint(records) {
		t.Errorf("records after the upgrade %v, before %v", got, records)
	}
	// Both packages' images still pull by digest (b's was not in the load).
	ns2 := c.Namespace(t)
	check := startPodLoad(ctx, t, c, ns2, nodes, refs["e2e-up-b"], 300*time.Millisecond)
	// One Pod a node: wait for the count, not for the ticks (a tick lost to
	// the clock left a node out).
	if err := harness.PollUntil(ctx, time.Minute, func() (bool, error) { return check.Created() >= len(nodes), nil }); err != nil {
		t.Fatalf("package b's image: %d Pods created of %d: %v", check.Created(), len(nodes), err)
	}
	if n := check.Stop(ctx, t, 2*time.Minute); n.Started < len(nodes) || len(n.Failures) > 0 {
		t.Errorf("package b's image after the upgrade: %s: %v", n, n.Failures)
	}
	return upgraded{prev: prev, refs: refs}
}

// packagesReady lists the Packages as name=Ready-status.
func packagesReady(ctx context.Context, t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	err = harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		var list v1alpha1.PackageList
		if err := pc.List(ctx, &list, client.InNamespace(cluster.DefaultNamespace)); err != nil {
			return false, err
		}
		out = out[:0]
		ready := true
		for _, p := range list.Items {
			s := "not ready"
			for _, cond := range p.Status.Conditions {
				if cond.Type == v1alpha1.Ready {
					s = string(cond.Status)
				}
			}
			ready = ready && s == "True"
			out = append(out, p.Name+"="+s)
		}
		return ready, nil
	})
	if err != nil {
		t.Fatalf("Packages %v: %v", out, err)
	}
	return out
}

// recordSecrets lists the deployed packages' records (name: keys).
func recordSecrets(ctx context.Context, t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	list, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelPackage})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		var keys []string
		for k, v := range s.Data {
			keys = append(keys, fmt.Sprintf("%s:%d", k, len(v)))
		}
		slices.Sort(keys)
		out = append(out, s.Name+"="+strings.Join(keys, ","))
	}
	slices.Sort(out)
	return out
}

// TestFreshUpgradeS3: the same upgrade in place on a registry the previous
// release set up on the cluster's object store with two replicas: the new
// replicas surge beside the old ones (no node's filesystem binds them), and
// no Pod created meanwhile is refused or fails to pull.
func TestFreshUpgradeS3(t *testing.T) {
	c := harness.Workstation(t)
	ctx := timeout(t, 15*time.Minute)
	store := objectStore(ctx, t, c)
	upgradeUnderLoad(ctx, t, c, []string{"--storage", store.URL, "--storage-credentials", "object-store"})
	image := registryDeployment(ctx, t, c).Spec.Template.Spec.Containers[0].Image
	var pods []string
	err := harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
		pods = pods[:0]
		nodes := map[string]bool{}
		for _, p := range readyPods(registryPods(ctx, t, c)) {
			pods = append(pods, p.Name+"@"+p.Spec.NodeName)
			if p.Spec.Containers[0].Image == image {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(pods) == 2 && len(nodes) == 2, nil
	})
	if err != nil {
		t.Fatalf("registry Pods after the upgrade on S3: %v: %v", pods, err)
	}
	if got := inject.DeploymentStorage(registryDeployment(ctx, t, c)); !strings.HasPrefix(got, "s3://"+store.Bucket+"/") {
		t.Fatalf("the registry's storage after the upgrade: %q", got)
	}
	t.Logf("registry Pods after the upgrade: %v", pods)
}
