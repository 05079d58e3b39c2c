package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/upload"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// uploaderRules are what a user needs to deploy through the agent: reach
// an agent Pod (list Pods, port-forward), read its CA, and create or
// update Packages in ferry's namespace.
var uploaderRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{install.CAConfigMap}, Verbs: []string{"get"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
	{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"packages"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
}

// TestUpload deploys through the agent's upload endpoint (`ferry deploy
// --via-agent`, one HTTPS stream through a tunnel) as a ServiceAccount
// allowed to apply Packages: the package is verified against the key the
// cluster trusts, pushed, and its Package becomes Ready; an unchanged
// upload pushes nothing. A tampered archive, one signed by a key the
// cluster does not trust, a caller without a token, a bad token and a
// user who may only read Packages are all refused with one line, and
// nothing of theirs reaches the registry.
func TestUpload(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 12*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	ns := cluster.DefaultNamespace
	priv, _, trusted := trustNewKey(ctx, t, c)
	uploader := tokenKubeconfig(ctx, t, c, "e2e-uploader", uploaderRules)
	viewer := tokenKubeconfig(ctx, t, c, "e2e-viewer", append(uploaderRules[:4:4],
		rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"packages"}, Verbs: []string{"get", "list"}}))
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forgetPackage(context.Background(), t, c, "e2e-upload") })

	// A variant of this run only: the root is new to the registry, so
	// finding it there after the refusals would mean one of them wrote it.
	variant := "upload-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pkg, _ := chartPackage(ctx, t, c, "e2e-upload", "1.0.0", variant, "e2e-upload", priv)
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	root := r.Root().Digest.String()

	// Refusals, each one line, each before anything is written.
	tampered := filepath.Join(t.TempDir(), "tampered.tar")
	copyFile(t, pkg, tampered)
	flipLayerByte(t, tampered)
	refusedCLI(ctx, t, uploader, tampered, "422", "does not match")
	otherPriv, _ := testKeys(t)
	untrusted, _ := chartPackage(ctx, t, c, "e2e-upload", "1.0.0", variant, "e2e-upload", otherPriv)
	refusedCLI(ctx, t, uploader, untrusted, "422", "signature")
	refusedCLI(ctx, t, viewer, pkg, "403", "may not create or update packages.ferry.dev")
	if got := registryStatus(ctx, t, c, "e2e-upload", root); got != http.StatusNotFound {
		t.Fatalf("after the refusals the registry answers %d for the package's root, want 404", got)
	}
	var p v1alpha1.Package
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e2e-upload"}, &p); err == nil {
		t.Fatal("a refused upload applied a Package")
	}
	// The endpoint itself: no token, a bad one.
	admin, err := upload.Connect(ctx, c.Config, c.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Upload(ctx, strings.NewReader("x"), upload.Options{}, nil); !errors.Is(err, upload.ErrNoToken) {
		t.Fatalf("upload with a client certificate: %v, want ErrNoToken", err)
	}
	for token, want := range map[string]int{"not-a-token": http.StatusUnauthorized} {
		f, err := os.Open(pkg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = admin.As(token).Upload(ctx, f, upload.Options{}, nil)
		f.Close()
		var refused *upload.Refused
		if !errors.As(err, &refused) || refused.Status != want || strings.Contains(refused.Message, "\n") {
			t.Fatalf("upload with token %q: %v, want a one-line %d", token, err, want)
		}
		t.Logf("token %q: %v", token, err)
	}
	// The upload, as the uploader.
	var res upload.Result
	start := time.Now()
	if err := ferryJSONAs(ctx, t, uploader, &res, "deploy", pkg, "--via-agent"); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(pkg)
	t.Logf("TIMING upload of %d bytes through the agent → Ready: %.1fs (receive %s, verify %s, push %s, ready %s); agent peak RSS %d MiB",
		fi.Size(), time.Since(start).Seconds(), res.Took.Receive, res.Took.Verify, res.Took.Push, res.Took.Ready, res.AgentPeakRSS>>20)
	if res.Ready != string(metav1.ConditionTrue) || res.Digest != root || res.Received != fi.Size() || res.Pushed == 0 || !res.Created ||
		len(res.SignedBy) != 1 || res.SignedBy[0] != trusted.Name || !strings.HasPrefix(res.User, "system:serviceaccount:"+ns+":e2e-uploader") || res.AgentPeakRSS == 0 {
		t.Fatalf("upload result: %+v", res)
	}
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e2e-upload"}, &p); err != nil {
		t.Fatal(err)
	}
	if !isReady(&p) || p.Status.Digest != root || len(p.Spec.Keys) != 1 || p.Spec.Keys[0].Name != trusted.Name {
		t.Fatalf("Package after the upload: spec %+v, status %+v", p.Spec, p.Status)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.Verified); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Package not verified in the cluster: %+v", p.Status.Conditions)
	}
	dep, err := c.Client.AppsV1().Deployments("e2e-upload").Get(ctx, "e2e-upload", metav1.GetOptions{})
	if err != nil || dep.Status.ReadyReplicas != 1 {
		t.Fatalf("the chart's Deployment: %v %+v", err, dep.Status)
	}

	// Unchanged: nothing pushed, the Package updated.
	var again upload.Result
	if err := ferryJSONAs(ctx, t, uploader, &again, "deploy", pkg, "--via-agent"); err != nil {
		t.Fatal(err)
	}
	if again.Pushed != 0 || again.Created || again.Ready != string(metav1.ConditionTrue) {
		t.Fatalf("unchanged upload: %+v", again)
	}
}

// trustNewKey makes a key pair and stores its public key in a key Secret
// of ferry's namespace (the keys the cluster trusts): the private key, the
// public key's file, and the Secret's reference.
func trustNewKey(ctx context.Context, t testing.TB, c *harness.Cluster) (*key.Private, *artifact.PublicKey, v1alpha1.KeyReference) {
	t.Helper()
	priv, pub := testKeys(t)
	pem, err := os.ReadFile(pub.Name)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := deploy.EnsureKeySecret(ctx, c.Client, cluster.DefaultNamespace, pem)
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub, ref
}

// benchMiB is the size of the deploy benchmarks' packages:
// FERRY_BENCH_DEPLOY_MIB, or 500.
func benchMiB() int {
	if n, err := strconv.Atoi(os.Getenv("FERRY_BENCH_DEPLOY_MIB")); err == nil && n > 0 {
		return n
	}
	return 500
}

// refusedCLI runs ferry deploy --via-agent as kubeconfig's user and
// requires a non-zero exit with one line on stderr holding each of want.
func refusedCLI(ctx context.Context, t *testing.T, kubeconfig, pkg string, want ...string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "deploy", pkg, "--via-agent", "--kubeconfig", kubeconfig).CombinedOutput()
	msg := strings.TrimSpace(string(out))
	if err == nil {
		t.Fatalf("ferry deploy --via-agent %s succeeded: %s", filepath.Base(pkg), msg)
	}
	if strings.Count(msg, "\n") > 0 {
		t.Fatalf("ferry deploy --via-agent %s: more than one line: %s", filepath.Base(pkg), msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Fatalf("ferry deploy --via-agent %s: %q, want %q in it", filepath.Base(pkg), msg, w)
		}
	}
	t.Logf("refused %s: %s", filepath.Base(pkg), msg)
}

// ferryJSONAs is ferryJSON as the user of another kubeconfig.
func ferryJSONAs(ctx context.Context, t *testing.T, kubeconfig string, v any, args ...string) error {
	t.Helper()
	return ferryJSON(ctx, t, &harness.Cluster{Kubeconfig: kubeconfig}, v, args...)
}

// tokenKubeconfig makes ServiceAccount name in ferry's namespace with a Role
// of rules, and returns a kubeconfig that presents a token of it.
func tokenKubeconfig(ctx context.Context, t testing.TB, c *harness.Cluster, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ns := cluster.DefaultNamespace
	cs := c.Client
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if _, err := cs.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	if cfg.Clusters["e2e"].CertificateAuthorityData == nil {
		cfg.Clusters["e2e"].CertificateAuthority = c.Config.CAFile
	}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "sa"}
	cfg.CurrentContext = "e2e"
	p := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyFile copies a file.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
