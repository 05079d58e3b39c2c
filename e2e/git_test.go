package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/artifact/sbomexec"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestGitSources carries a git repository made with Debian's git into the
// cluster: the package holds it at the commit create resolved; deploy
// pushes its artifact by digest; the in-cluster git server serves it, and
// a Pod clones it (go-git, shallow as Flux does, and whole) at that
// commit, as does Debian's git from the node, whose push is refused; Flux
// GitRepository and OCIRepository objects and an Argo CD Application that
// name the repository are pointed at the copies in the cluster, and one
// naming another branch is refused.
func TestGitSources(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	_, installed, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("git server %s, ready in %.1fs", installed.Git, installed.GitReady.Seconds())

	// A repository, and a package carrying it with the clone program.
	src, commit, tree := fleetRepo(t)
	defDir := t.TempDir()
	gitCmd(t, "", "clone", "-q", src, filepath.Join(defDir, "fleet"))
	layoutImage(ctx, t, defDir, staticBinary(t, "github.com/ferrypkg/ferry/e2e/internal/gitclone"), mkimg.Options{Path: "gitclone"})
	const url = "https://git.example.com/org/fleet.git"
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: e2e-git, version: 1.0.0}
platforms: [linux/%s]
components:
  - name: gitops
    images:
      - {ref: docker.io/library/gitclone:1.0, layout: images}
    repositories:
      - {url: %q, path: fleet, ref: main}
`, runtime.GOARCH, url)
	if err := os.WriteFile(filepath.Join(defDir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(defDir)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub, _ := trustNewKey(ctx, t, c)
	pkg := filepath.Join(t.TempDir(), "e2e-git.tar")
	sboms := sbomexec.Generator{Path: filepath.Join(binDir(t), sbomexec.HelperName)}
	created, err := build.Create(ctx, d, build.CreateOptions{Output: pkg, Git: gitrepo.Fetcher{}, SBOM: sboms, SignKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	carried := created.Config.Components[0].Repositories[0]
	if carried.Commit != commit || carried.Revision != "main@sha1:"+commit {
		t.Fatalf("carried %+v, want commit %s", carried, commit)
	}

	start := time.Now()
	var deployed map[string]any
	if err := ferryJSON(ctx, t, c, &deployed, "deploy", pkg, "--key", pub.Name); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING deploy of a package with a git repository → Ready: %.1fs", time.Since(start).Seconds())
	t.Cleanup(func() { forgetPackage(context.Background(), t, c, "e2e-git") })
	if got := registryStatus(ctx, t, c, carried.Path, carried.Digest.String()); got != 200 {
		t.Fatalf("the registry answers %d for %s@%s", got, carried.Path, carried.Digest)
	}
	// The image's SBOM went with it: a referrer of its manifest in the
	// in-cluster registry, the one ferry.json records.
	image := created.Config.Components[0].Images[0]
	if len(image.SBOMs) != 1 {
		t.Fatalf("image SBOMs in ferry.json: %+v", image.SBOMs)
	}
	if refs := registryReferrers(ctx, t, c, "library/gitclone", image.SBOMs[0].Subject.String()); len(refs) != 1 ||
		refs[0].Digest != image.SBOMs[0].Digest || refs[0].ArtifactType != image.SBOMs[0].ArtifactType {
		t.Fatalf("referrers of the image in the cluster: %+v, want the SBOM %+v", refs, image.SBOMs[0])
	}

	// Clones from a Pod, through the git server, as the registry's account.
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user, pass := string(sec.Data["username"]), string(sec.Data["password"])
	repoURL := installed.Git + "/" + carried.Key + ".git"
	ns := c.Namespace(t)
	for _, depth := range []string{"1", "0"} {
		start := time.Now()
		out := runPod(ctx, t, c, ns, "clone-depth-"+depth, "docker.io/library/gitclone:1.0", []string{repoURL, depth},
			[]corev1.EnvVar{{Name: "GIT_USERNAME", Value: user}, {Name: "GIT_PASSWORD", Value: pass}})
		want := fmt.Sprintf("head %s tree %s", commit, tree)
		if !strings.HasPrefix(out, want) {
			t.Fatalf("clone at depth %s from a Pod: %q, want %q", depth, out, want)
		}
		t.Logf("TIMING clone (depth %s) from a Pod: %.1fs: %s", depth, time.Since(start).Seconds(), out)
	}
	if out := runPod(ctx, t, c, ns, "clone-anonymous", "docker.io/library/gitclone:1.0", []string{repoURL, "1"}, nil); !strings.Contains(out, "authentication required") {
		t.Fatalf("an anonymous clone: %q, want it refused", out)
	}

	// Debian's git on the node: clone at the commit; push refused.
	authURL := strings.Replace(repoURL, "http://", "http://"+user+":"+pass+"@", 1)
	clone := filepath.Join(t.TempDir(), "clone")
	gitCmd(t, "", "clone", "-q", authURL, clone)
	if head := gitCmd(t, clone, "rev-parse", "HEAD"); head != commit {
		t.Fatalf("git clone from the node: HEAD %s, want %s", head, commit)
	}
	gitCmd(t, clone, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "x")
	if out, err := exec.CommandContext(ctx, "git", "-C", clone, "push", "-q", "origin", "HEAD:main").CombinedOutput(); err == nil {
		t.Fatalf("git push to the git server succeeded: %s", out)
	} else {
		t.Logf("push refused: %s", strings.TrimSpace(string(out)))
	}

	// GitOps sources: the agent points them at the copies.
	dyn := stubSourceCRDs(ctx, t, c)
	gitRepos := dyn.Resource(schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "gitrepositories"}).Namespace(ns)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cluster.FluxGroup + "/v1", "kind": "GitRepository", "metadata": map[string]any{"name": "fleet"},
		"spec": map[string]any{"url": "ssh://git@git.example.com/org/fleet", "interval": "1m", "ref": map[string]any{"branch": "main"}},
	}}
	got, err := gitRepos.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u, _, _ := unstructured.NestedString(got.Object, "spec", "url"); u != repoURL {
		t.Errorf("GitRepository url %q, want %q", u, repoURL)
	}
	// It follows the carried ref, which the git server moves with the
	// deployed package (main at the carried commit).
	if cm, _, _ := unstructured.NestedString(got.Object, "spec", "ref", "commit"); cm != "" {
		t.Errorf("GitRepository ref.commit %q, want none (the carried ref)", cm)
	}
	if br, _, _ := unstructured.NestedString(got.Object, "spec", "ref", "branch"); br != "main" {
		t.Errorf("GitRepository ref.branch %q, want main", br)
	}
	if s, _, _ := unstructured.NestedString(got.Object, "spec", "secretRef", "name"); s != install.GitSecretName {
		t.Errorf("GitRepository secretRef %q", s)
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Get(ctx, install.GitSecretName, metav1.GetOptions{}); err != nil {
		t.Errorf("the git Secret in the source's namespace: %v", err)
	}
	obj.SetName("fleet-dev")
	_ = unstructured.SetNestedField(obj.Object, "dev", "spec", "ref", "branch")
	if _, err := gitRepos.Create(ctx, obj, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "main@sha1:"+commit) {
		t.Errorf("a GitRepository of another branch: %v, want it refused naming the carried revision", err)
	} else {
		t.Logf("refused: %v", err)
	}
	ociRepos := dyn.Resource(schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "ocirepositories"}).Namespace(ns)
	got, err = ociRepos.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cluster.FluxGroup + "/v1", "kind": "OCIRepository", "metadata": map[string]any{"name": "fleet"},
		"spec": map[string]any{"url": "oci://git.example.com/org/fleet", "interval": "1m"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dg, _, _ := unstructured.NestedString(got.Object, "spec", "ref", "digest"); dg != carried.Digest.String() {
		t.Errorf("OCIRepository ref.digest %q, want %s", dg, carried.Digest)
	}
	apps := dyn.Resource(schema.GroupVersionResource{Group: cluster.ArgoGroup, Version: "v1alpha1", Resource: "applications"}).Namespace(ns)
	got, err = apps.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cluster.ArgoGroup + "/v1alpha1", "kind": "Application", "metadata": map[string]any{"name": "fleet"},
		"spec": map[string]any{"source": map[string]any{"repoURL": url, "path": "apps", "targetRevision": "main"}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev, _, _ := unstructured.NestedString(got.Object, "spec", "source", "targetRevision"); rev != "main" {
		t.Errorf("Application targetRevision %q, want main (the carried ref)", rev)
	}
	creds, err := c.Client.CoreV1().Secrets(ns).Get(ctx, install.GitCredsSecretName, metav1.GetOptions{})
	if err != nil || creds.Labels[install.ArgoSecretTypeLabel] != "repo-creds" || string(creds.Data["url"]) != installed.Git+"/" {
		t.Errorf("Argo CD repo-creds Secret: %v, %+v", err, creds)
	}

	// Removed: the repository's artifact goes with the package.
	var removed map[string]any
	if err := ferryJSON(ctx, t, c, &removed, "remove", "e2e-git"); err != nil {
		t.Fatal(err)
	}
	if got := registryStatus(ctx, t, c, carried.Path, carried.Digest.String()); got != 404 {
		t.Errorf("after remove the registry answers %d for %s@%s, want 404", got, carried.Path, carried.Digest)
	}
}

// fleetRepo makes a repository with Debian's git: two commits on main
// (a manifest tree, then a change), and returns its folder, main's commit
// and tree.
func fleetRepo(t *testing.T) (dir, commit, tree string) {
	t.Helper()
	dir = t.TempDir()
	gitCmd(t, dir, "init", "-q", "-b", "main")
	for i, files := range []map[string]string{
		{"apps/web/kustomization.yaml": "resources: [deploy.yaml]\n", "apps/web/deploy.yaml": "kind: Deployment\n"},
		{"apps/web/deploy.yaml": "kind: Deployment\nreplicas: 2\n", "README.md": "fleet\n"},
	} {
		for name, data := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		gitCmd(t, dir, "add", ".")
		gitCmd(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", fmt.Sprint("commit ", i))
	}
	return dir, gitCmd(t, dir, "rev-parse", "HEAD"), gitCmd(t, dir, "rev-parse", "HEAD^{tree}")
}

// gitCmd runs Debian's git in dir and returns its trimmed output.
func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// staticBinary builds a static linux binary of pkg for the cluster's images.
func staticBinary(t *testing.T, pkg string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", path, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v: %s", pkg, err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runPod runs image with args to completion in ns and returns its output
// (logs), trimmed; the agent rewrites the image to the registry.
func runPod(ctx context.Context, t *testing.T, c *harness.Cluster, ns, name, image string, args []string, env []corev1.EnvVar) string {
	t.Helper()
	pods := c.Client.CoreV1().Pods(ns)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: image, Args: args, Env: env}},
		},
	}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		cur, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s: %v (phase %s)", ns, name, ctx.Err(), cur.Status.Phase)
		case <-time.After(250 * time.Millisecond):
		}
	}
	b, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// stubSourceCRDs installs Flux's GitRepository and OCIRepository and Argo
// CD's Application as schemaless CRDs (what the agent needs to see them,
// without their controllers) and returns a dynamic client.
func stubSourceCRDs(ctx context.Context, t *testing.T, c *harness.Cluster) dynamic.Interface {
	t.Helper()
	ext, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	for _, crd := range []struct{ group, version, kind, plural string }{
		{cluster.FluxGroup, "v1", "GitRepository", "gitrepositories"},
		{cluster.FluxGroup, "v1", "OCIRepository", "ocirepositories"},
		{cluster.ArgoGroup, "v1alpha1", "Application", "applications"},
	} {
		obj := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: crd.plural + "." + crd.group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: crd.group, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: crd.kind, Plural: crd.plural, ListKind: crd.kind + "List", Singular: strings.ToLower(crd.kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: crd.version, Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &yes}}}},
			},
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		name := obj.Name
		t.Cleanup(func() {
			_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The API server serves a new CRD a moment after it is created.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(schema.GroupVersionResource{Group: cluster.ArgoGroup, Version: "v1alpha1", Resource: "applications"}).List(ctx, metav1.ListOptions{})
		_, err2 := dyn.Resource(schema.GroupVersionResource{Group: cluster.FluxGroup, Version: "v1", Resource: "ocirepositories"}).List(ctx, metav1.ListOptions{})
		if err == nil && err2 == nil {
			return dyn
		}
		if time.Now().After(deadline) {
			t.Fatalf("stub CRDs not served: %v %v", err, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// layoutImage stores a one-layer image of binary, made with opts, in the
// OCI layout dir/images, tagged 1.0 (what a definition names with
// {ref: docker.io/library/NAME:1.0, layout: images}), and returns its
// manifest's digest.
func layoutImage(ctx context.Context, t *testing.T, dir string, binary []byte, opts mkimg.Options) string {
	t.Helper()
	return layoutTagged(ctx, t, dir, "1.0", binary, opts)
}

// registryReferrers lists the referrers of repo@digest in the in-cluster
// registry (OCI 1.1 referrers API), with init's account.
func registryReferrers(ctx context.Context, t *testing.T, c *harness.Cluster, repo, digest string) []ocispec.Descriptor {
	t.Helper()
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cluster.RegistryHost(cluster.DefaultNodePort)+"/v2/"+repo+"/referrers/"+digest, nil)
	req.SetBasicAuth(string(sec.Data["username"]), string(sec.Data["password"]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var idx ocispec.Index
	if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("referrers of %s@%s: %s, %v", repo, digest, resp.Status, err)
	}
	return idx.Manifests
}
