package backup_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func registryAt(t testing.TB, host string) *remote.Registry {
	t.Helper()
	reg, err := artifact.RemoteOptions{}.Registry(host)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func randomBlob(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// pushImage pushes an image of the given layers to host/repo:tag and
// returns its manifest's descriptor.
func pushImage(t testing.TB, host, repo, tag string, layers ...[]byte) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	r, err := registryAt(t, host).Repository(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	push := func(mt string, data []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if ok, _ := r.Exists(ctx, d); !ok {
			if err := r.Push(ctx, d, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: push(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"},"tag":"`+tag+`"}`))}
	for _, l := range layers {
		m.Layers = append(m.Layers, push(ocispec.MediaTypeImageLayerGzip, l))
	}
	data, _ := json.Marshal(m)
	d := push(ocispec.MediaTypeImageManifest, data)
	if err := r.Tag(ctx, d, tag); err != nil {
		t.Fatal(err)
	}
	return d
}

// tagsOf lists every repository:tag → digest of a registry.
func tagsOf(t testing.TB, host string) map[string]digest.Digest {
	t.Helper()
	ctx := context.Background()
	reg := registryAt(t, host)
	out := map[string]digest.Digest{}
	var repos []string
	defer func() {
		for k := range out {
			if strings.HasPrefix(k, "ferry/") {
				delete(out, k)
			}
		}
	}()
	if err := reg.Repositories(ctx, "", func(p []string) error { repos = append(repos, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, name := range repos {
		r, _ := reg.Repository(ctx, name)
		var tags []string
		if err := r.Tags(ctx, "", func(p []string) error { tags = append(tags, p...); return nil }); err != nil {
			t.Fatal(err)
		}
		for _, tag := range tags {
			d, err := r.Resolve(ctx, tag)
			if err != nil {
				t.Fatal(err)
			}
			out[name+":"+tag] = d.Digest
		}
	}
	return out
}

func receipt(t testing.TB, host string) map[digest.Digest]int64 {
	t.Helper()
	rc, err := artifact.HaveRegistry(context.Background(), registryAt(t, host), host, "")
	if err != nil {
		t.Fatal(err)
	}
	own, err := artifact.HaveRepository(context.Background(), registryAt(t, host), host, "ferry/agent")
	if err != nil {
		t.Fatal(err)
	}
	for d := range own.Blobs { // ferry's own image, left out: its blobs are its alone
		delete(rc.Blobs, d)
	}
	return rc.Blobs
}

func testKey(t testing.TB) *key.Private {
	t.Helper()
	kp, err := key.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := kp.WriteFiles(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}
	k, err := key.LoadPrivate(filepath.Join(dir, "k.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fakeCluster(t testing.TB, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Package{}).Build()
}

func keySecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ferry-key-1", Namespace: "ferry", Labels: map[string]string{"ferry.dev/public-key": "true"}},
		Data: map[string][]byte{"cosign.pub": []byte("-----BEGIN PUBLIC KEY-----\n...\n-----END PUBLIC KEY-----\n")}}
}

func appPackage() *v1alpha1.Package {
	return &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ferry", UID: "u-1", ResourceVersion: "7", Labels: map[string]string{"team": "a"}},
		Spec:   v1alpha1.PackageSpec{Repository: "app", Tag: "1.0.0", Keys: []v1alpha1.KeyReference{{Kind: "Secret", Name: "ferry-key-1"}}},
		Status: v1alpha1.PackageStatus{Digest: "sha256:" + string(bytes.Repeat([]byte("a"), 64))}}
}

func fixedNow(s string) func() time.Time {
	return func() time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
}

// TestBackupRestore backs a registry up and restores it into another: the
// same tags at the same digests, the same blobs, the Package (spec only)
// and its key back; then an incremental backup carries only what changed.
func TestBackupRestore(t *testing.T) {
	ctx := context.Background()
	src := registrytest.New(t)
	shared := randomBlob(t, 300<<10)
	pushImage(t, src, "app", "1.0.0", shared, randomBlob(t, 200<<10))
	pushImage(t, src, "library/nginx", "1.27", shared, randomBlob(t, 100<<10))
	pushImage(t, src, "library/nginx", "latest", shared, randomBlob(t, 100<<10))
	// ferry's own images: a cluster restored into has its own.
	pushImage(t, src, "ferry/agent", "v1", randomBlob(t, 1000))
	k := testKey(t)
	cl := fakeCluster(t, appPackage(), keySecret())
	dir := t.TempDir()
	full := filepath.Join(dir, "full.tar")
	res, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src, Client: cl, Namespace: "ferry"}, backup.File(full),
		backup.Options{Key: k, Now: fixedNow("2025-01-02T03:04:05Z")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tags != 3 || res.Repositories != 2 || res.Packages != 1 || res.Keys != 1 || !res.Signed {
		t.Fatalf("backup: %+v", res)
	}
	// It is a package `ferry package verify --key` checks.
	r, err := artifact.Open(ctx, full)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{k}}); err != nil {
		t.Fatalf("verify the backup as a package: %v", err)
	}
	for _, left := range []string{full + ".partial", full + ".resume.json"} {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("%s left behind", left)
		}
	}

	dst := registrytest.New(t)
	target := fakeCluster(t)
	rr, err := backup.Restore(ctx, backup.Target{Registry: registryAt(t, dst), Client: target}, []string{full}, backup.RestoreOptions{Keys: []artifact.Verifier{k}, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	sameContent(t, dst, src)
	var pkg v1alpha1.Package
	if err := target.Get(ctx, client.ObjectKey{Namespace: "ferry", Name: "app"}, &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Spec.Repository != "app" || pkg.Spec.Tag != "1.0.0" || pkg.Labels["team"] != "a" || pkg.Status.Digest != "" || pkg.UID == "u-1" {
		t.Fatalf("restored Package: %+v", pkg)
	}
	var sec corev1.Secret
	if err := target.Get(ctx, client.ObjectKey{Namespace: "ferry", Name: "ferry-key-1"}, &sec); err != nil || len(sec.Data["cosign.pub"]) == 0 {
		t.Fatalf("restored key Secret: %v %v", sec.Data, err)
	}
	t.Logf("full backup: %d blobs carried (%d bytes), archive %d bytes; restore pushed %d, mounted %d", res.Carried, res.CarriedSize, res.Size, rr.Pushed, rr.Mounted)

	// Incremental: a new version of app, one new layer; the shared one
	// and the old version are left to the full backup.
	newLayer := randomBlob(t, 150<<10)
	pushImage(t, src, "app", "1.1.0", shared, newLayer)
	info, err := backup.ReadInfoFile(full)
	if err != nil {
		t.Fatal(err)
	}
	inc := filepath.Join(dir, "inc.tar")
	ires, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src, Client: cl, Namespace: "ferry"}, backup.File(inc),
		backup.Options{Key: k, Since: info.Base(), Now: fixedNow("2025-01-03T03:04:05Z")})
	if err != nil {
		t.Fatal(err)
	}
	// New: the layer, the config (it names the tag) and the manifest.
	if ires.Carried != 3 || ires.Base == nil || ires.Base.Root != res.Root.Digest {
		t.Fatalf("incremental backup carried %d blobs (want 3: layer, config, manifest), base %+v", ires.Carried, ires.Base)
	}
	t.Logf("incremental backup: %d blobs carried (%d bytes), %d left to the base (%d bytes); archive %d bytes", ires.Carried, ires.CarriedSize, ires.Omitted, ires.OmittedSize, ires.Size)
	ri, err := artifact.Open(ctx, inc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Verify(ctx, ri, "", artifact.VerifyOptions{Keys: []artifact.Verifier{k}}); err != nil {
		t.Fatalf("verify the incremental backup: %v", err)
	}

	// The chain restores in order, whatever order it is given in; the
	// increment alone is refused naming its base.
	dst2 := registrytest.New(t)
	_, err = backup.Restore(ctx, backup.Target{Registry: registryAt(t, dst2)}, []string{inc}, backup.RestoreOptions{})
	if !errors.Is(err, backup.ErrMissingLink) {
		t.Fatalf("an increment alone: %v, want ErrMissingLink", err)
	}
	t.Logf("an increment alone: %v", err)
	if _, err := backup.Restore(ctx, backup.Target{Registry: registryAt(t, dst2)}, []string{inc, full}, backup.RestoreOptions{Keys: []artifact.Verifier{k}}); err != nil {
		t.Fatal(err)
	}
	sameContent(t, dst2, src)
}

// sameContent fails t unless registry dst holds what src holds: every
// repository:tag at the same digest, the same blobs at the same sizes.
func sameContent(t testing.TB, dst, src string) {
	t.Helper()
	if got, want := tagsOf(t, dst), tagsOf(t, src); !equal(got, want) {
		t.Fatalf("restored tags %v, want %v", got, want)
	}
	if got, want := receipt(t, dst), receipt(t, src); !equal(got, want) {
		t.Fatalf("restored %d blobs, want %d", len(got), len(want))
	}
}

func equal[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

var _ = sort.Strings
