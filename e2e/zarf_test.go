package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf/zarftest"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// zarfNS is the namespace of the Zarf package's chart and manifest.
const zarfNS = "zarf-shop"

// TestZarfDeploy (issue 35): a real Zarf v0.60.0 package, made here by
// `zarf package create` (artifact/zarf/zarftest, as TestZarfInterop) from a
// zarf.yaml with a runnable image (the tiny program serving HTTP, pulled
// from an in-process registry on loopback), a local chart whose Deployment
// "web" runs it, a manifest Deployment "worker" running it, a file and a
// git repository at a tag. Its zarf.yaml converted + created, and the built
// package imported, each signed with a ferry key, are deployed in turn with
// `ferry deploy` and removed with `ferry remove`. Each time, every Pod of
// both Deployments is Ready and runs the image from the in-cluster registry
// by the digest in Zarf's images/index.json: its spec names
// 127.0.0.1:31999/shop/app@<that digest> (the agent's rewrite) and its
// container status's imageID has that digest; the repository's artifact is
// in the registry, and the imported package's image has Zarf's SBOM as its
// referrer there. `zarf package deploy` pushes the image with that same
// manifest digest (it changes only the name and tag it pushes under), so
// equal digests is what "the same workloads by the same images" means;
// the test needs no Zarf init in the cluster. After remove, no Deployment,
// Pod, image or repository artifact is left. Skipped unless Zarf is built
// (`make interop-zarf` builds it and runs this test with
// FERRY_REQUIRE_ZARF=1, which turns the skip into a failure).
func TestZarfDeploy(t *testing.T) {
	zarfPath := zarftest.Bin(t)
	c := harness.Get(t)
	ctx := timeout(t, 12*time.Minute)

	// The runnable image, in a registry zarf package create pulls from.
	img, err := mkimg.New(c.Tiny(t), mkimg.Options{Cmd: []string{"serve", ":8080"}, Labels: map[string]string{"e2e": "zarf"}})
	if err != nil {
		t.Fatal(err)
	}
	host := registrytest.New(t)
	pushTagged(ctx, t, img, host+"/shop/app", "1.0")

	start := time.Now()
	zp := zarftest.Make(t, zarfPath, zarftest.Source{Image: host + "/shop/app:1.0", Name: "zarf-shop", Namespace: zarfNS, Replicas: 2, Port: 8080})
	t.Logf("TIMING zarf package create: %.1fs", time.Since(start).Seconds())
	priv, pub := testKeys(t)
	dir := t.TempDir()
	start = time.Now()
	res, converted := zp.Convert(ctx, t, build.CreateOptions{Output: filepath.Join(dir, "converted.tar.zst"), SignKey: priv})
	t.Logf("TIMING convert + create: %.1fs (%d gaps)", time.Since(start).Seconds(), len(res.Gaps))
	start = time.Now()
	im := zp.Import(ctx, t, build.CreateOptions{Output: filepath.Join(dir, "imported.tar.zst"), SignKey: priv})
	t.Logf("TIMING import + create: %.1fs (%d gaps)", time.Since(start).Seconds(), len(im.Result.Gaps))
	zarfDigest := zarftest.ImageDigest(t, im.Zarf)
	if zarfDigest != img.Manifest.Digest.String() {
		t.Fatalf("Zarf carries %s, the image is %s", zarfDigest, img.Manifest.Digest)
	}

	start = time.Now()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING ferry init: %.1fs", time.Since(start).Seconds())
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = removePkg(ctx, c, "zarf-shop")
		_ = c.Client.CoreV1().Namespaces().Delete(ctx, zarfNS, metav1.DeleteOptions{})
	})
	for _, p := range []struct {
		name  string
		pkg   *build.CreateResult
		sboms int // Zarf's SBOM of the image, imported only
	}{{"converted", converted, 0}, {"imported", im.Created, 1}} {
		t.Run(p.name, func(t *testing.T) { deployZarf(ctx, t, c, p.pkg, pub.Name, zp.Commit, zarfDigest, p.sboms) })
	}
}

// deployZarf deploys pkg with `ferry deploy`, checks its Deployments' Pods
// run the image by zarfDigest, then removes it with `ferry remove` and
// checks nothing of it is left.
func deployZarf(ctx context.Context, t *testing.T, c *harness.Cluster, pkg *build.CreateResult, pubPath, commit, zarfDigest string, sboms int) {
	name := pkg.Config.Name
	comp := pkg.Config.Components[0]
	if len(comp.Images) == 1 && len(comp.Images[0].SBOMs) != sboms {
		t.Fatalf("%s carries %d SBOMs of its image, want %d", name, len(comp.Images[0].SBOMs), sboms)
	}
	if len(comp.Images) != 1 || comp.Images[0].Digest.String() != zarfDigest || len(comp.Repositories) != 1 || comp.Repositories[0].Commit != commit {
		t.Fatalf("%s carries images %+v, repositories %+v; want the image by %s, commit %s", name, comp.Images, comp.Repositories, zarfDigest, commit)
	}
	start := time.Now()
	var rec rollout.Record
	if err := ferryJSON(ctx, t, c, &rec, "deploy", pkg.Path, "--key", pubPath); err != nil {
		t.Fatal(err)
	}
	deployed := time.Since(start)
	if rec.Root != pkg.Root.Digest || len(rec.Releases) != 1 || rec.Releases[0].String() != zarfNS+"/web" {
		t.Fatalf("deployed root %s, releases %v; want %s, %s/web", rec.Root, rec.Releases, pkg.Root.Digest, zarfNS)
	}
	want := cluster.RegistryHost(cluster.DefaultNodePort) + "/shop/app@" + zarfDigest
	var pods int
	for _, dep := range []string{"web", "worker"} {
		if err := harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) {
			d, err := c.Client.AppsV1().Deployments(zarfNS).Get(ctx, dep, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return rolledOut(d) && d.Status.ReadyReplicas == 2, fmt.Errorf("deployment %s: %+v", dep, d.Status)
		}); err != nil {
			t.Fatalf("%v\n%s", err, podReport(ctx, c, zarfNS))
		}
		pods += checkZarfPods(ctx, t, c, dep, want, zarfDigest)
	}
	t.Logf("TIMING %s: ferry deploy (verify, push %d bytes, install, Ready) %.1fs; both Deployments' %d Pods Ready, running %s, %.1fs after the start",
		name, rec.BytesPushed, deployed.Seconds(), pods, want, time.Since(start).Seconds())
	// Zarf's SBOM of the image (imported only) went with it: a referrer of
	// its manifest in the in-cluster registry.
	refs := registryReferrers(ctx, t, c, "shop/app", zarfDigest)
	if sboms := comp.Images[0].SBOMs; len(refs) != len(sboms) || len(sboms) == 1 && (refs[0].Digest != sboms[0].Digest || refs[0].ArtifactType != definition.ArtifactTypeSyft) {
		t.Fatalf("referrers of the image in the cluster: %+v, want the SBOMs %+v", refs, sboms)
	}
	repoArt := comp.Repositories[0]
	if code := registryStatus(ctx, t, c, repoArt.Path, repoArt.Digest.String()); code != 200 {
		t.Fatalf("repository %s@%s in the registry: HEAD %d", repoArt.Path, repoArt.Digest, code)
	}

	start = time.Now()
	var removed rollout.UninstallResult
	if err := ferryJSON(ctx, t, c, &removed, "remove", name); err != nil {
		t.Fatal(err)
	}
	if len(removed.Releases) != 1 || removed.Releases[0].String() != zarfNS+"/web" || len(removed.Objects) != 1 || removed.Objects[0].Name != "worker" ||
		len(removed.Images) != 1 || removed.Images[0] != "shop/app@"+zarfDigest ||
		len(removed.Repositories) != 1 || removed.Repositories[0] != repoArt.Path+"@"+repoArt.Digest.String() {
		t.Fatalf("ferry remove: %+v", removed)
	}
	if err := harness.PollUntil(ctx, time.Minute, func() (bool, error) {
		deps, err := c.Client.AppsV1().Deployments(zarfNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods, err := c.Client.CoreV1().Pods(zarfNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(deps.Items) == 0 && len(pods.Items) == 0, fmt.Errorf("%d Deployments, %d Pods left", len(deps.Items), len(pods.Items))
	}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct{ repo, digest string }{{"shop/app", zarfDigest}, {repoArt.Path, repoArt.Digest.String()}} {
		if code := registryStatus(ctx, t, c, a.repo, a.digest); code != 404 {
			t.Fatalf("%s@%s after remove: HEAD %d", a.repo, a.digest, code)
		}
	}
	t.Logf("TIMING %s: ferry remove + Pods gone %.1fs; images deleted %v, registry storage %d → %d bytes",
		name, time.Since(start).Seconds(), removed.Images, removed.Storage.Before, removed.Storage.After)
}

// checkZarfPods checks every Pod of Deployment dep is Ready, its spec names
// want (the agent's rewrite) and its container ran the image by digest; it
// returns how many there are.
func checkZarfPods(ctx context.Context, t *testing.T, c *harness.Cluster, dep, want, digest string) int {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(zarfNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + dep})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		n++
		if got := p.Spec.Containers[0].Image; got != want {
			t.Errorf("pod %s names %s, want %s", p.Name, got, want)
		}
		if len(p.Status.ContainerStatuses) != 1 || !podReady(&p) {
			t.Errorf("pod %s not Ready: %+v", p.Name, p.Status.ContainerStatuses)
			continue
		}
		if id := p.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, "@"+digest) {
			t.Errorf("pod %s ran image %s, want digest %s", p.Name, id, digest)
		}
	}
	if n != 2 {
		t.Errorf("Deployment %s has %d Pods, want 2", dep, n)
	}
	return n
}

// pushTagged copies img to the registry repository at host/repo (plain
// HTTP) and tags it tag.
func pushTagged(ctx context.Context, t *testing.T, img *mkimg.Image, hostRepo, tag string) {
	t.Helper()
	repo, err := remote.NewRepository(hostRepo)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	if err := oras.CopyGraph(ctx, img, repo, img.Manifest, oras.DefaultCopyGraphOptions); err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, img.Manifest, tag); err != nil {
		t.Fatal(err)
	}
}
