package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/quickstart"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestQuickstart runs the README's quickstart shell block whole, as a user
// pastes it into bash, against this cluster: the definition written,
// create, key generate, sign, push, `ferry init`, deploy from the
// registry, list. Only the values of the variables the block declares
// change: REGISTRY is an in-process registry, IMAGE the tiny image served
// there (it pauses by default, as nginx serves). `ferry` is bin/'s, as
// `make build` installs it; KUBECONFIG names this cluster. Then the
// Deployment the quickstart wrote runs its image from the in-cluster
// registry by digest, and `ferry remove hello` takes it away.
func TestQuickstart(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	bin := binDir(t)

	script, err := quickstart.Script(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.New(t)
	img, err := mkimg.New(c.Tiny(t), mkimg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pushTagged(ctx, t, img, reg+"/quickstart/web", "1.0")
	if script, err = quickstart.SetVariables(script, map[string]string{"REGISTRY": reg, "IMAGE": reg + "/quickstart/web:1.0"}); err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	env := append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+c.Kubeconfig,
		"COSIGN_PASSWORD=quickstart", // key generate and sign ask on a terminal otherwise
		"DOCKER_CONFIG="+t.TempDir(),
	)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "ferry"), "remove", "hello")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("ferry remove hello: %v\n%s", err, out)
		}
	})
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = work, env
	out, err := cmd.CombinedOutput()
	t.Logf("the quickstart printed:\n%s", out)
	if err != nil {
		t.Fatalf("the quickstart failed: %v\n--- script:\n%s", err, script)
	}
	t.Logf("TIMING the README's quickstart (create → sign → push → init → deploy → list): %.1fs", time.Since(start).Seconds())
	if !regexp.MustCompile(`(?m)^hello\s+1\.0\.0\s`).Match(out) {
		t.Errorf("ferry list shows no hello 1.0.0")
	}

	d, err := c.Client.AppsV1().Deployments("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.RegistryHost(cluster.DefaultNodePort) + "/quickstart/web@" + img.Manifest.Digest.String()
	if got := d.Spec.Template.Spec.Containers[0].Image; got != want || d.Status.ReadyReplicas < 1 {
		t.Errorf("Deployment hello runs %s (%d ready), want %s ready", got, d.Status.ReadyReplicas, want)
	}
}
