package centre_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	fleetmember "github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestBundleReceiptOfRepository: a site holds package shop 1.0.0 in its
// repository shop, and blob B only in repository other (another package's);
// shop 2.0.0 adds B. Its report carries a receipt per Package repository;
// the centre makes the bundle against shop's, so it carries B, and pushed
// into the site's registry the delta completes there. A delta against the
// site's whole receipt — what the bundle was before — leaves B out and is
// refused there (the site's deploy completes a delta in the package's
// repository alone). The track's repository, apps/shop-v2, is not the
// package's name: the bundle is package shop.
func TestBundleReceiptOfRepository(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	const kib = 1 << 10
	a, b := noise(11, 256*kib), noise(12, 512*kib)
	v1 := pkgBuild(t, "shop", "1.0.0", map[string][]byte{"a.bin": a})
	v2 := pkgBuild(t, "shop", "2.0.0", map[string][]byte{"a.bin": a, "b.bin": b})
	other := pkgBuild(t, "other", "1.0.0", map[string][]byte{"b.bin": b})

	// The site: shop 1.0.0 and other, each in the repository of its name
	// (as ferry deploy pushes them), and their Packages.
	siteHost := registrytest.New(t)
	roots := map[string]string{}
	for repo, path := range map[string]string{"shop:1.0.0": v1, "other:1.0.0": other} {
		r, err := artifact.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Push(ctx, r, siteHost+"/"+repo, artifact.PushOptions{}); err != nil {
			t.Fatal(err)
		}
		roots[r.Config().Name] = r.Root().Digest.String()
	}
	blobB := digest.FromBytes(b)
	if _, ok := have(t, v2).Blobs[blobB]; !ok {
		t.Fatalf("the file b.bin is not the blob %s in shop 2.0.0: the test tests nothing", blobB)
	}
	if _, ok := have(t, other).Blobs[blobB]; !ok {
		t.Fatalf("the file b.bin is not the blob %s in other: the test tests nothing", blobB)
	}
	if _, ok := have(t, v1).Blobs[blobB]; ok {
		t.Fatal("shop 1.0.0 holds B already: the test tests nothing")
	}
	scheme := runtime.NewScheme()
	if err := pkgapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkgapi.Package
	for name, root := range roots {
		pkgs = append(pkgs, pkgapi.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: name},
			Spec: pkgapi.PackageSpec{Repository: name, Digest: root}})
	}
	pc := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(&pkgs[0], &pkgs[1]).Build()
	cs := k8sfake.NewClientset()
	siteReg, err := artifact.RemoteOptions{}.Registry(siteHost)
	if err != nil {
		t.Fatal(err)
	}

	// The centre: shop 2.0.0 in apps/shop-v2, placed on the site.
	w.push(v2, "apps/shop-v2:2.0.0")
	w.place("shop", "apps/shop-v2", "stable", map[string]string{"site": "ship"}, "", v1alpha1.Strategy{})
	if _, err := w.c.Promote(ctx, "shop", "stable", "2.0.0", "alice"); err != nil {
		t.Fatal(err)
	}
	w.reconcile()

	// The site's first report, imported.
	file := filepath.Join(t.TempDir(), "site.json")
	rep, err := fleetmember.WriteReport(ctx, cs, pc, "ferry", siteReg, file, fleetmember.ReportFileOptions{
		Token: w.token(centre.TokenOptions{}), Name: "ship", Labels: map[string]string{"site": "ship"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repositories) != 2 || rep.Repositories["shop"] == nil || rep.Repositories["other"] == nil {
		t.Fatalf("the report's receipts of repositories: %d", len(rep.Repositories))
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Import(ctx, data); err != nil {
		t.Fatal(err)
	}
	if m := w.member("ship"); m.Status.Receipts == "" || m.Status.Receipt == "" {
		t.Fatalf("the member's receipts: %+v", m.Status)
	}

	out := filepath.Join(t.TempDir(), "update.tar.zst")
	res, err := w.c.Bundle(ctx, "ship", "", out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Package != "shop" || res.Repository != "apps/shop-v2" || res.WholeReceipt || res.Receipt == "" {
		t.Errorf("the bundle: %+v", res)
	}
	if omitted(t, out)[blobB] {
		t.Fatalf("the bundle leaves out B, which the site holds only in repository other")
	}
	t.Logf("bundle from shop's receipt: %d bytes, %d blobs carried (%d bytes), %d left out (%d bytes)",
		res.Delta.Size, res.Delta.Carried, res.Delta.CarriedSize, res.Delta.Omitted, res.Delta.OmittedSize)

	// What the bundle was: the delta against the whole receipt leaves B
	// out, and the site refuses it.
	whole, err := artifact.HaveRegistry(ctx, siteReg, siteHost, "")
	if err != nil {
		t.Fatal(err)
	}
	before := filepath.Join(t.TempDir(), "before.tar.zst")
	old := deltaOf(t, v2, whole, before)
	if !omitted(t, before)[blobB] {
		t.Fatal("the delta against the whole receipt carries B: the test tests nothing")
	}
	t.Logf("delta from the whole receipt: %d bytes, %d blobs left out (%d bytes)", old.Size, old.Omitted, old.OmittedSize)
	if err := pushDelta(t, before, siteHost+"/shop:2.0.0"); !errors.Is(err, artifact.ErrMissingBlobs) {
		t.Fatalf("the site took the delta against its whole receipt: %v", err)
	}
	if err := pushDelta(t, out, siteHost+"/shop:2.0.0"); err != nil {
		t.Fatalf("the site refuses the bundle: %v", err)
	}
}

// omitted is what a delta leaves out.
func omitted(t *testing.T, path string) map[digest.Digest]bool {
	t.Helper()
	r, err := artifact.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Delta() == nil {
		t.Fatalf("%s is not a delta", path)
	}
	out := map[digest.Digest]bool{}
	for _, d := range r.Delta().Omitted {
		out[d.Digest] = true
	}
	return out
}

func deltaOf(t *testing.T, pkg string, have *artifact.Receipt, out string) *artifact.DeltaResult {
	t.Helper()
	r, err := artifact.Open(t.Context(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := artifact.Delta(t.Context(), r, have, out, artifact.DeltaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func pushDelta(t *testing.T, path, ref string) error {
	t.Helper()
	r, err := artifact.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = artifact.Push(t.Context(), r, ref, artifact.PushOptions{})
	return err
}

// have is the receipt of a package archive.
func have(t *testing.T, path string) *artifact.Receipt {
	t.Helper()
	r, err := artifact.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := artifact.Have(t.Context(), r, "")
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestBundleStoredReceiptsHostile: what the centre's registry gives back
// for a member's receipts is checked before a bundle is made from it: a
// manifest that is not of receipts, a receipt that is not one, a manifest
// that is not there — each refused in one line.
func TestBundleStoredReceiptsHostile(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	r := w.push(bigPackage(t), "apps/big:1.0.0")
	w.place("big", "apps/big", "stable", map[string]string{"site": "ship"}, "", v1alpha1.Strategy{})
	if _, err := w.c.Promote(ctx, "big", "stable", "1.0.0", "alice"); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	_, half, _, _ := receipts(t, r)
	key, err := wire.NewSiteKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicPEM()
	rep := &wire.Report{Member: "ship", Created: w.now(), Token: w.token(centre.TokenOptions{}), PublicKey: string(pub),
		Labels: map[string]string{"site": "ship"}, Receipt: receiptJSON(t, half),
		Repositories: map[string]json.RawMessage{"big": receiptJSON(t, half)}, Packages: []v1alpha1.MemberPackage{}}
	if _, err := w.c.Import(ctx, signed(t, key, rep)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "update.tar.zst")
	if _, err := w.c.Bundle(ctx, "ship", "", out); err != nil {
		t.Fatal(err)
	}

	repo, err := w.remote.Repository(w.host + "/" + centre.ReceiptRepository + "/ship")
	if err != nil {
		t.Fatal(err)
	}
	pushManifest := func(artifactType string, layer []byte) string {
		desc := content.NewDescriptorFromBytes(artifact.MediaTypeReceipt, layer)
		if err := repo.Push(ctx, desc, bytes.NewReader(layer)); err != nil {
			t.Fatal(err)
		}
		desc.Annotations = map[string]string{centre.AnnotationReceiptRepository: "big"}
		m, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, artifactType, oras.PackManifestOptions{
			Layers: []ocispec.Descriptor{desc}, ManifestAnnotations: map[string]string{centre.AnnotationReceiptRepositories: "1"}})
		if err != nil {
			t.Fatal(err)
		}
		return m.Digest.String()
	}
	for _, tc := range []struct {
		name, receipts, says string
	}{
		{"not a manifest of receipts", pushManifest("application/vnd.example.other", []byte(`{}`)), "not a manifest of receipts"},
		{"not a receipt", pushManifest(artifact.MediaTypeReceipt, []byte(`{"mediaType":"x"}`)), "member ship's stored receipt sha256:"},
		{"not there", "sha256:" + strings.Repeat("e", 64), "read member ship's receipts sha256:eeee"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := w.member("ship")
			m.Status.Receipts = tc.receipts
			if err := w.kc.Status().Update(ctx, m); err != nil {
				t.Fatal(err)
			}
			_, err := w.c.Bundle(ctx, "ship", "", out)
			if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("bundle: %v, want one line saying %q", err, tc.says)
			}
			t.Logf("refused: %v", err)
		})
	}
}
