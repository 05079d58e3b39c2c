package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// upgradeDowngrade runs, on a cluster this ferry has just upgraded (its
// init ran last), what docs/operations.md says of downgrades:
//
//  1. this ferry's init refuses a cluster whose formats a newer ferry wrote
//     (the ferry-version ConfigMap set one generation ahead), in one line
//     naming both ferrys and what to do, and changes nothing;
//  2. the old ferry (oldFerry, a ferry from before the record, such as
//     53a21d7, which checks nothing) runs its init on the cluster and
//     succeeds: no format it reads changed; it leaves the record alone;
//  3. this ferry's init again: it succeeds, records itself as the last
//     init (the ferry that set the cluster up kept), and every Package is
//     Ready.
//
// initArgs are the flags both inits are given besides --kubeconfig and -o
// json (the storage flags the cluster was set up with: an init with other
// ones moves the registry's storage). The old ferry's --bin-dir is its
// own folder, as its `make build` left it.
func upgradeDowngrade(ctx context.Context, t *testing.T, c *harness.Cluster, oldFerry string, initArgs ...string) {
	t.Helper()
	ns := cluster.DefaultNamespace
	cms := c.Client.CoreV1().ConfigMaps(ns)
	before, err := cms.Get(ctx, cluster.VersionName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after the upgrade: ConfigMap %s: %v", cluster.VersionName, err)
	}
	setup, err := cluster.SetupFromData(before.Data)
	if err != nil || setup.LastInit.Generation != cluster.FormatGeneration {
		t.Fatalf("after the upgrade the cluster records %+v (%v); want this ferry's generation %d last", setup, err, cluster.FormatGeneration)
	}
	t.Logf("formats: set up by %s, last init %s", setup.SetUpBy, setup.LastInit)

	// 1. A newer ferry's formats: refused in one line, nothing changed.
	future := setup
	future.LastInit = cluster.Ferry{Version: "v99.0.0", Commit: "e2e0000000000000", Generation: cluster.FormatGeneration + 1}
	ahead := before.DeepCopy()
	ahead.Data = future.Data()
	if _, err := cms.Update(ctx, ahead, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reg, err := c.Client.AppsV1().Deployments(ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stderr, code := runInit(ctx, t, c, filepath.Join(binDir(t), "ferry"), initArgs)
	line := strings.TrimSpace(stderr)
	if code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, "v99.0.0") ||
		!strings.Contains(line, "generation "+strconv.Itoa(cluster.FormatGeneration+1)) || !strings.Contains(line, "--allow-downgrade") {
		t.Fatalf("init on a newer ferry's formats: exit %d, stderr %q; want one line naming both and --allow-downgrade", code, stderr)
	}
	t.Logf("init refused: %s", line)
	if after, err := c.Client.AppsV1().Deployments(ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{}); err != nil || after.ResourceVersion != reg.ResourceVersion {
		t.Fatalf("a refused init changed the registry's Deployment (%v)", err)
	}
	cur, err := cms.Get(ctx, cluster.VersionName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Data = setup.Data()
	if _, err := cms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// 2. The old ferry, which knows no record: its init works.
	start := time.Now()
	if stderr, code := runInit(ctx, t, c, oldFerry, append([]string{"--bin-dir", filepath.Dir(oldFerry)}, initArgs...)); code != 0 {
		t.Fatalf("the old ferry's init on an upgraded cluster: exit %d: %s", code, stderr)
	}
	t.Logf("old ferry's init: %.1fs", time.Since(start).Seconds())
	if cur, err := cms.Get(ctx, cluster.VersionName, metav1.GetOptions{}); err != nil || !maps.Equal(cur.Data, setup.Data()) {
		t.Fatalf("the old ferry's init changed the record (%v): %v", err, cur)
	}
	readyPackages(ctx, t, c, "after the old ferry's init")

	// 3. This ferry again.
	var res struct {
		Formats cluster.Setup `json:"formats"`
	}
	if err := ferryJSON(ctx, t, c, &res, append([]string{"init"}, initArgs...)...); err != nil {
		t.Fatal(err)
	}
	if res.Formats.SetUpBy != setup.SetUpBy || res.Formats.LastInit.Generation != cluster.FormatGeneration {
		t.Fatalf("init again recorded %+v; the cluster was set up by %s", res.Formats, setup.SetUpBy)
	}
	readyPackages(ctx, t, c, "after this ferry's init again")
}

// runInit runs `ferry init` of the binary ferry on c and returns its
// stderr and exit code.
func runInit(ctx context.Context, t *testing.T, c *harness.Cluster, ferry string, args []string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, ferry, append(append([]string{"init"}, args...), "--kubeconfig", c.Kubeconfig, "-o", "json")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s init: %v", ferry, err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

// readyPackages waits until every Package of ferry's namespace is Ready
// and logs how many.
func readyPackages(ctx context.Context, t *testing.T, c *harness.Cluster, when string) {
	t.Helper()
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.PackageList
	if err := pc.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Namespace != cluster.DefaultNamespace {
			continue
		}
		waitPackage(ctx, t, pc, p.Name, 3*time.Minute, isReady)
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	st, _ := json.Marshal(names)
	t.Logf("%s: %d Packages Ready %s", when, len(list.Items), st)
}
