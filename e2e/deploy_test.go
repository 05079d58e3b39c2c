package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/agent"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestDeployImages: a signed package holding docker.io/library/app:1.0 (a
// generated image) is refused unsigned-checked and with a wrong key, then
// deployed: its image lands in the in-cluster registry under library/app by
// the recorded digest, the record lists it, and a pod whose image the
// agent's rewriter maps from docker.io/library/app:1.0 runs from
// 127.0.0.1:31999 by digest.
func TestDeployImages(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 8*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}

	// A package whose image comes from an OCI layout, named as on Docker Hub.
	pkg, pub := appPackage(ctx, t, c, "e2e-app")
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}

	// Fail closed: no key, a wrong key.
	if _, err := deployPkg(ctx, c, r, deploy.Deploy{}); !errors.Is(err, deploy.ErrUnsigned) {
		t.Fatalf("deploy without a key: %v", err)
	}
	_, otherPub := testKeys(t)
	if _, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{otherPub}}); !errors.Is(err, artifact.ErrSignature) {
		t.Fatalf("deploy with a wrong key: %v", err)
	}
	st := &rollout.State{Client: c.Client, Namespace: cluster.DefaultNamespace}
	if rec, _ := st.Get(ctx, r.Config().Name); rec != nil {
		t.Fatalf("a refused deploy recorded %s", rec.Name)
	}

	start := time.Now()
	rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING deploy (verify + push images): %.1fs", time.Since(start).Seconds())
	t.Cleanup(func() { forgetPackage(context.Background(), t, c, rec.Name) })
	images, err := st.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rw := &agent.Rewriter{Registry: cluster.RegistryHost(cluster.DefaultNodePort), Images: images, RequireKnown: true}
	image, err := rw.Rewrite("docker.io/library/app:1.0")
	if err != nil {
		t.Fatal(err)
	}
	if want := "127.0.0.1:31999/library/app@" + r.Config().Components[0].Images[0].Digest.String(); image != want {
		t.Fatalf("rewritten to %s, want %s", image, want)
	}

	// A pod runs it from the in-cluster registry, with init's pull secret.
	ns := c.Namespace(t)
	pull, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.PullSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster.PullSecretName}, Type: pull.Type, Data: pull.Data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := tinyPod("app", image, corev1.PullAlways)
	p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: cluster.PullSecretName}}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := harness.WaitPodReady(ctx, c.Client, ns, "app"); err != nil {
		t.Fatalf("pod from the deployed image: %v", err)
	}

	// `ferry deploy` of the same package again succeeds (blobs all there).
	start = time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", pkg, "--key", pub.Name, "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
	if err != nil {
		t.Fatalf("ferry deploy: %v: %s", err, exitStderr(err))
	}
	t.Logf("TIMING redeploy of an unchanged package (CLI): %.1fs", time.Since(start).Seconds())
	var again rollout.Record
	if err := json.Unmarshal(out, &again); err != nil || again.Root != rec.Root {
		t.Fatalf("ferry deploy printed %s (%v)", out, err)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", pkg, "--kubeconfig", c.Kubeconfig).CombinedOutput(); err == nil {
		t.Fatalf("ferry deploy without --key succeeded: %s", out)
	}

	// From a registry reference: pulled (signature first), then deployed.
	src := registrytest.New(t) + "/pkgs/e2e-app:1.0.0"
	if _, err := artifact.Push(ctx, r, src, artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", src, "--key", otherPub.Name, "--kubeconfig", c.Kubeconfig).CombinedOutput(); err == nil || !strings.Contains(string(out), otherPub.Name) {
		t.Fatalf("ferry deploy REF with a wrong key: %v: %s", err, out)
	}
	out, err = exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", src, "--key", pub.Name, "--kubeconfig", c.Kubeconfig, "-o", "json").Output()
	if err != nil {
		t.Fatalf("ferry deploy REF: %v: %s", err, exitStderr(err))
	}
	if err := json.Unmarshal(out, &again); err != nil || again.Root != rec.Root {
		t.Fatalf("ferry deploy REF printed %s (%v)", out, err)
	}
}

// appPackage creates a signed package named name holding
// docker.io/library/app:1.0, the tiny image labelled e2e=deploy from an OCI
// layout (the same image whichever test makes it, so every package record
// agrees on its digest), and returns its path and the key that verifies it.
func appPackage(ctx context.Context, t *testing.T, c *harness.Cluster, name string) (string, *artifact.PublicKey) {
	t.Helper()
	return appPackageWith(ctx, t, c, name, mkimg.Options{Labels: map[string]string{"e2e": "deploy"}})
}

// appPackageWith is appPackage with an image of its own, made with opts.
func appPackageWith(ctx context.Context, t *testing.T, c *harness.Cluster, name string, opts mkimg.Options) (string, *artifact.PublicKey) {
	t.Helper()
	dir := t.TempDir()
	layoutImage(ctx, t, dir, c.Tiny(t), opts)
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: app\n    images:\n      - {ref: docker.io/library/app:1.0, layout: images}\n", name, runtime.GOARCH)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), name+".tar.zst")
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg, pub
}

// deployPkg deploys r as `ferry deploy` does (deploy.Deploy.Run, which
// applies its Package and waits for the controller), with the cluster's
// clients, through the registry's address on the nodes unless d says.
func deployPkg(ctx context.Context, c *harness.Cluster, r *artifact.Reader, d deploy.Deploy) (*rollout.Record, error) {
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		return nil, err
	}
	d.Client, d.Packages = c.Client, pc
	res, err := d.Run(ctx, r)
	if err != nil {
		return nil, err
	}
	return res.Record, nil
}

// removePkg removes a deployed package as `ferry remove` does: its Package
// deleted, what the controller removed reported.
func removePkg(ctx context.Context, c *harness.Cluster, name string) (*rollout.UninstallResult, error) {
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		return nil, err
	}
	res, ok, err := deploy.RemovePackage(ctx, pc, cluster.DefaultNamespace, name)
	if err == nil && !ok {
		err = fmt.Errorf("no Package %s", name)
	}
	return res, err
}
