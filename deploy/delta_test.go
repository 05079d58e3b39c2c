package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// fakeCluster is what Deploy.Run needs of a cluster, up to applying the
// Package: the Secrets `ferry init` leaves (the registry's address and
// account, here an in-process registry) and the Package API.
func fakeCluster(t *testing.T, host string) (*fake.Clientset, client.WithWatch) {
	t.Helper()
	ns := cluster.DefaultNamespace
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.StateName}, Data: cluster.State{Registry: host}.Data()},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.AuthSecretName}, Data: cluster.Account{Username: "ferry", Password: "pw"}.Data()},
	)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return cs, crfake.NewClientBuilder().WithScheme(scheme).Build()
}

// deltaVersion creates version of a small package whose file says content,
// signed with sk.
func deltaVersion(t *testing.T, version, content string, sk artifact.Signer) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		definition.FileName: "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: app, version: " + version + "}\ncomponents:\n  - name: app\n    manifests:\n      - name: ns\n        files: [ns.yaml]\n    files:\n      - {source: big.bin, target: /big.bin}\n      - {source: app.conf, target: /etc/app.conf}\n",
		"ns.yaml":           "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: app\n",
		"big.bin":           string(noise(1 << 20)),
		"app.conf":          content,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "app-"+version+".tar.zst")
	if _, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out, SignKey: sk}); err != nil {
		t.Fatal(err)
	}
	return out
}

func open(t *testing.T, p string) *artifact.Reader {
	t.Helper()
	r, err := artifact.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDeployDelta: the round trip receipt → delta → deploy, through
// Deploy.Run (what `ferry deploy` runs) against an in-process registry:
// the delta verifies with the key, completes v2 in the registry that holds
// v1 and applies its Package; into a registry without v1 it is refused
// before anything is pushed or applied, naming the missing blobs.
func TestDeployDelta(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	kp, err := key.Generate([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.WriteFiles(filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")); err != nil {
		t.Fatal(err)
	}
	sk, err := key.LoadPrivate(filepath.Join(dir, "cosign.key"), []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	pk, err := artifact.LoadPublicKey(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	v1 := deltaVersion(t, "1.0.0", "a = 1\n", sk)
	v2 := deltaVersion(t, "2.0.0", "a = 2\n", sk)

	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	cs, pc := fakeCluster(t, host)
	run := func(cs *fake.Clientset, pc client.WithWatch, path string) (*deploy.Result, error) {
		d := &deploy.Deploy{Client: cs, Packages: pc, Keys: []*artifact.PublicKey{pk}, NoWait: true}
		return d.Run(ctx, open(t, path))
	}
	if _, err := run(cs, pc, v1); err != nil {
		t.Fatal(err)
	}
	// The far side's receipt, the delta against it.
	reg, err := artifact.RemoteOptions{}.Registry(host)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := artifact.HaveRegistry(ctx, reg, host, "")
	if err != nil {
		t.Fatal(err)
	}
	update := filepath.Join(t.TempDir(), "update.tar.zst")
	dres, err := artifact.Delta(ctx, open(t, v2), rc, update, artifact.DeltaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dres.Omitted == 0 || dres.Size >= fileSize(t, v2)/2 {
		t.Fatalf("delta: %+v, v2 is %d bytes", dres, fileSize(t, v2))
	}
	res, err := run(cs, pc, update)
	if err != nil {
		t.Fatal(err)
	}
	if res.Package.Spec.Digest != open(t, v2).Root().Digest.String() || res.Pushed.Root != res.Package.Spec.Digest {
		t.Fatalf("Package %+v, pushed %+v", res.Package.Spec, res.Pushed.MirrorResult)
	}
	if _, err := artifact.Verify(ctx, repo(t, host+"/app"), "2.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{pk}}); err != nil {
		t.Fatalf("v2 in the registry: %v", err)
	}

	// A cluster whose registry lacks v1.
	empty := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	cs2, pc2 := fakeCluster(t, empty)
	_, err = run(cs2, pc2, update)
	var me *artifact.MissingBlobsError
	if !errors.As(err, &me) || len(me.Missing) != dres.Omitted {
		t.Fatalf("deploy of the delta where v1 is not: %v", err)
	}
	var pkgs v1alpha1.PackageList
	if err := pc2.List(ctx, &pkgs); err != nil || len(pkgs.Items) != 0 {
		t.Fatalf("Packages after a refused delta: %v %v", pkgs.Items, err)
	}
	reg2, _ := artifact.RemoteOptions{}.Registry(empty)
	if err := reg2.Repositories(ctx, "", func(repos []string) error {
		if len(repos) > 0 {
			return fmt.Errorf("repositories %v after a refused delta", repos)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func repo(t *testing.T, ref string) *remote.Repository {
	t.Helper()
	r, err := artifact.RemoteOptions{}.Repository(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// noise is n bytes that do not compress, the same each time.
func noise(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
