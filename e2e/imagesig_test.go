package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestImagePolicyAdmission follows a publisher's image signature from
// `cosign sign` to the agent's admission webhook: two tiny images in a
// loopback registry, one signed by the real cosign CLI with a key; a
// definition whose policy (required) covers the unsigned one is refused by
// `ferry package create` in one line naming it; the package of the signed
// one passes `ferry package verify --images` (text and JSON); deployed
// with a Deployment naming the image as published, its Pod is admitted
// and gets Ready, and the Package status lists the policy with the key's
// fingerprint. Then the signature is deleted from the in-cluster registry
// and, once the agent restarted (it keeps admissions in its cache), a new
// Pod of that image is refused by the API server with one line naming the
// image, the policy and the cause.
func TestImagePolicyAdmission(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	start := time.Now()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	const name, appNS = "e2e-imagesig", "e2e-imagesig"

	// The publisher: two images in a loopback registry, a cosign key pair,
	// one image signed.
	host := registrytest.New(t)
	signedRef, unsignedRef := host+"/sig/app:1.0", host+"/sig/plain:1.0"
	signed := pushTiny(ctx, t, c, host, "sig/app", "1.0", "signed")
	pushTiny(ctx, t, c, host, "sig/plain", "1.0", "unsigned")
	cosign := &cosignCLI{bin: peertool.Require(t, "cosign"), home: t.TempDir()}
	pubDir := t.TempDir()
	cosign.must(ctx, t, "generate-key-pair", "--output-key-prefix", filepath.Join(pubDir, "publisher"))
	cosign.must(ctx, t, "sign", "--key", filepath.Join(pubDir, "publisher.key"), "--allow-http-registry", "--tlog-upload=false", "-y",
		host+"/sig/app@"+signed)
	publisherPEM, err := os.ReadFile(filepath.Join(pubDir, "publisher.pub"))
	if err != nil {
		t.Fatal(err)
	}

	// The package signer's key, as ferry writes it (password pw).
	_, pkgPub := testKeys(t)
	pkgKey := filepath.Join(filepath.Dir(pkgPub.Name), "k.key")
	ferry := func(dir string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=pw")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("ferry %s: %v", strings.Join(args, " "), err)
		}
		return out.String(), errb.String(), code
	}

	// 1. A policy covering the unsigned image: create refuses, naming it.
	bad := sigDefinition(t, name+"-bad", unsignedRef, publisherPEM, "")
	_, stderr, code := ferry(bad, "package", "create", "-f", "bad.tar", "--sbom=false", "--sign-key", pkgKey)
	if code != 1 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "image "+unsignedRef) ||
		!strings.Contains(stderr, `policy "publisher"`) || !strings.Contains(stderr, "image policy not satisfied") {
		t.Fatalf("create of a package whose required policy covers an unsigned image: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(bad, "bad.tar")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused create left its archive: %v", err)
	}
	t.Logf("refused at create: %s", strings.TrimSpace(stderr))

	// The signed image's package, with a Deployment naming it as published.
	good := sigDefinition(t, name, signedRef, publisherPEM, appNS)
	if out, stderr, code := ferry(good, "package", "create", "-f", "good.tar", "--sbom=false", "--sign-key", pkgKey); code != 0 {
		t.Fatalf("create of the signed image's package: exit %d: %s%s", code, out, stderr)
	}
	pkg := filepath.Join(good, "good.tar")

	// 2. Offline, from the package alone: verify --images.
	out, stderr, code := ferry(good, "package", "verify", pkg, "--key", pkgPub.Name, "--images")
	if code != 0 || !strings.Contains(out, "image "+signedRef+" satisfies policy publisher: signed by") {
		t.Fatalf("package verify --images: exit %d: %s%s", code, out, stderr)
	}
	out, stderr, code = ferry(good, "package", "verify", pkg, "--key", pkgPub.Name, "--images", "-o", "json")
	var vr struct {
		Images []artifact.VerifiedImage `json:"images"`
	}
	if code != 0 {
		t.Fatalf("package verify --images -o json: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &vr); err != nil {
		t.Fatalf("package verify --images -o json printed %s: %v", out, err)
	}
	if len(vr.Images) != 1 || vr.Images[0].Ref != signedRef || vr.Images[0].Policy != "publisher" || vr.Images[0].Digest != signed ||
		vr.Images[0].Result == nil || len(vr.Images[0].Result.Signers) == 0 {
		t.Fatalf("package verify --images -o json: images %+v", vr.Images)
	}

	// 3. Deployed: the Deployment's Pod is admitted and Ready.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := removePkg(ctx, c, name); err != nil {
			t.Logf("remove %s: %v", name, err)
		}
		forgetPackage(ctx, t, c, name)
	})
	var rec rollout.Record
	if err := ferryJSON(ctx, t, c, &rec, "deploy", pkg, "--key", pkgPub.Name); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	img := r.Config().Components[0].Images[0]
	if img.Digest.String() != signed || img.Policy != "publisher" || len(img.Signatures) == 0 {
		t.Fatalf("the package records %s: %+v", signedRef, img)
	}
	appPod := waitAppPod(ctx, t, c, appNS)
	t.Logf("the Deployment's pod %s runs %s", appPod.Name, appPod.Spec.Containers[0].Image)
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := waitPackage(ctx, t, pc, name, 2*time.Minute, func(p *v1alpha1.Package) bool { return len(p.Status.ImagePolicies) > 0 })
	fp := keyFingerprint(t, publisherPEM)
	if st := p.Status.ImagePolicies; len(st) != 1 || st[0].Name != "publisher" || !st[0].Required ||
		!slices.Equal(st[0].Authorities, []string{"key " + fp}) || !slices.Equal(st[0].Images, []string{signedRef}) {
		t.Fatalf("Package status imagePolicies %+v, want publisher, required, key %s, image %s", st, fp, signedRef)
	}

	// 4. The signature gone from the in-cluster registry: no Pod of the
	// image is admitted any more.
	sigs := deleteSignatures(ctx, t, c, "sig/app", signed, img.Signatures)
	t.Logf("deleted %s from the in-cluster registry", strings.Join(sigs, ", "))
	restartAgent(ctx, t, c)
	ns := c.Namespace(t)
	waitServiceAccount(ctx, t, c, ns)
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, tinyPod("unsigned-now", signedRef, corev1.PullIfNotPresent), metav1.CreateOptions{})
	if err == nil {
		t.Fatalf("a Pod of %s was admitted after its signature was deleted", signedRef)
	}
	// The agent names the image by repository and the digest it would run.
	named := host + "/sig/app@" + signed
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "image "+named+": ") || !strings.Contains(msg, `policy "publisher"`) ||
		!strings.Contains(msg, sigs[0]) {
		t.Fatalf("refusal %q: want one line naming image %s, policy publisher and the missing signature %s", msg, named, sigs[0])
	}
	t.Logf("refused at admission: %s", msg)

	// The Deployment's next Pod too: the ReplicaSet's event says why.
	if err := c.Client.CoreV1().Pods(appNS).Delete(ctx, appPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	event := waitEvent(ctx, t, c, appNS, "FailedCreate", `policy "publisher"`)
	if strings.Contains(event, "\n") || !strings.Contains(event, "image "+named+": ") || !strings.Contains(event, sigs[0]) {
		t.Fatalf("the ReplicaSet's FailedCreate event %q: want one line naming image %s and the missing signature %s", event, named, sigs[0])
	}
	t.Logf("TIMING TestImagePolicyAdmission: %.1fs", time.Since(start).Seconds())
}

// cosignCLI runs the real cosign with a private HOME (no keyring, no TUF
// cache of the user's) and password pw.
type cosignCLI struct{ bin, home string }

func (c *cosignCLI) must(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.home
	cmd.Env = append(os.Environ(), "HOME="+c.home, "COSIGN_PASSWORD=pw", "DOCKER_CONFIG="+filepath.Join(c.home, ".docker"),
		"TUF_ROOT="+filepath.Join(c.home, ".sigstore"), "COSIGN_EXPERIMENTAL=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pushTiny pushes the tiny image, labelled variant, to host/repo:tag and
// returns its manifest digest.
func pushTiny(ctx context.Context, t *testing.T, c *harness.Cluster, host, repo, tag, variant string) string {
	t.Helper()
	img, err := mkimg.New(c.Tiny(t), mkimg.Options{Labels: map[string]string{"e2e": "imagesig-" + variant}})
	if err != nil {
		t.Fatal(err)
	}
	pushTagged(ctx, t, img, host+"/"+repo, tag)
	return img.Manifest.Digest.String()
}

// sigDefinition writes a definition of package name holding image ref
// under policy publisher (required, the key publisherPEM) and returns its
// folder; with ns, a Deployment there runs ref as published.
func sigDefinition(t *testing.T, name, ref string, publisherPEM []byte, ns string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keys", "publisher.pub"), publisherPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	var manifests string
	if ns != "" {
		if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
			t.Fatal(err)
		}
		dep := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: 1
  selector: {matchLabels: {app: imagesig}}
  template:
    metadata: {labels: {app: imagesig}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: tiny
          image: %s
          args: [serve, ":8080"]
          ports: [{containerPort: 8080}]
          readinessProbe: {httpGet: {port: 8080}, periodSeconds: 1}
`, ref)
		if err := os.WriteFile(filepath.Join(dir, "m", "app.yaml"), []byte(dep), 0o644); err != nil {
			t.Fatal(err)
		}
		manifests = fmt.Sprintf("    manifests:\n      - {name: m, namespace: %s, files: [m]}\n", ns)
	}
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: %s, version: 1.0.0}
platforms: [linux/%s]
imagePolicies:
  - name: publisher
    required: true
    authorities: [{key: keys/publisher.pub}]
verify: publisher
components:
  - name: app
    images:
      - %s
%s`, name, runtime.GOARCH, ref, manifests)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitEvent waits for an event of reason in ns whose message holds want
// and returns that message.
func waitEvent(ctx context.Context, t *testing.T, c *harness.Cluster, ns, reason, want string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, want) {
				return e.Message
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event holding %q in %s after a minute; events: %s", reason, want, ns, strings.Join(seen, "; "))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitAppPod waits for the Ready Pod of the Deployment in ns.
func waitAppPod(ctx context.Context, t *testing.T, c *harness.Cluster, ns string) *corev1.Pod {
	t.Helper()
	for {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=imagesig"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				ready, err := harness.WaitPodReady(ctx, c.Client, ns, p.Name)
				if err != nil {
					t.Fatal(err)
				}
				return ready
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no pod of the Deployment in %s", ns)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// keyFingerprint is sha256:<hex> of a PEM public key's DER form.
func keyFingerprint(t *testing.T, pemKey []byte) string {
	t.Helper()
	block, _ := pem.Decode(pemKey)
	if block == nil {
		t.Fatal("no PEM block in the publisher's key")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// deleteSignatures deletes, with init's account, the evidence manifests
// the package recorded for image digest d of repo from the in-cluster
// registry (cosign's sha256-<hex>.sig tag names the first), and returns
// their digests.
func deleteSignatures(ctx context.Context, t *testing.T, c *harness.Cluster, repo, d string, sigs []artifact.ImageSignature) []string {
	t.Helper()
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, ref string) int {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+cluster.RegistryHost(cluster.DefaultNodePort)+"/v2/"+repo+"/manifests/"+ref, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json")
		req.SetBasicAuth(string(sec.Data["username"]), string(sec.Data["password"]))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tag := strings.Replace(d, ":", "-", 1) + ".sig"
	if code := do(http.MethodHead, tag); code != http.StatusOK {
		t.Fatalf("cosign's tag %s of %s in the in-cluster registry: HEAD %d", tag, repo, code)
	}
	var out []string
	for _, s := range sigs {
		if code := do(http.MethodDelete, s.Digest.String()); code != http.StatusAccepted {
			t.Fatalf("DELETE %s %s of %s: %d", s.Kind, s.Digest, repo, code)
		}
		out = append(out, s.Digest.String())
	}
	if code := do(http.MethodHead, tag); code != http.StatusNotFound {
		t.Fatalf("cosign's tag %s of %s after the delete: HEAD %d", tag, repo, code)
	}
	return out
}

// restartAgent restarts the agent's Deployment as `kubectl rollout
// restart` does and waits until only new, available Pods are left: the
// verdicts the old ones cached are gone.
func restartAgent(ctx context.Context, t *testing.T, c *harness.Cluster) {
	t.Helper()
	deps := c.Client.AppsV1().Deployments(cluster.DefaultNamespace)
	old, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector()})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := deps.Patch(ctx, install.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		d, err := deps.Get(ctx, install.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector()})
		if err != nil {
			t.Fatal(err)
		}
		if rolledOut(d) && !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return slices.ContainsFunc(old.Items, func(o corev1.Pod) bool { return o.UID == p.UID })
		}) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("agent restart: %d pods, deployment status %+v", len(pods.Items), d.Status)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func rolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}
