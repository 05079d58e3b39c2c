package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
)

// TestDeltaRoundTrip carries an update across the gap as the issue asks:
// v1 (four images) deployed; the far side's receipt of its in-cluster
// registry (`registry have --cluster`); on the near side, v2 (one image
// changed) made into a delta against that receipt; the delta deployed by
// `ferry deploy`, which completes v2 in the cluster's registry, verifies
// every blob of its signed graph and installs it. Then a delta that leaves
// out what the cluster does not hold is refused before anything changes,
// naming what is missing.
func TestDeltaRoundTrip(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(t)}); err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	t.Cleanup(func() { forgetPackage(context.Background(), t, c, "e2e-delta") })
	dir := t.TempDir()
	ferry := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return string(out), fmt.Errorf("ferry %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(exitStderr(err)))
		}
		return string(out), nil
	}
	deployed := func(pkg string) rollout.Record {
		t.Helper()
		out, err := ferry("deploy", pkg, "--key", pub.Name, "--kubeconfig", c.Kubeconfig, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var rec rollout.Record
		if err := json.Unmarshal([]byte(out), &rec); err != nil {
			t.Fatalf("ferry deploy printed %s: %v", out, err)
		}
		return rec
	}

	v1, _ := deltaPackage(ctx, t, "1.0.0", 1, priv)
	if rec := deployed(v1); rec.Version != "1.0.0" {
		t.Fatalf("v1 deployed as %+v", rec)
	}
	// The far side: what its registry holds.
	if _, err := ferry("registry", "have", "--cluster", "--kubeconfig", c.Kubeconfig, "-f", "receipt.json"); err != nil {
		t.Fatal(err)
	}
	// The near side: v2, one image of four changed, as a delta.
	v2, changed := deltaPackage(ctx, t, "2.0.0", 2, priv)
	if _, err := ferry("package", "delta", v2, "--have", "receipt.json", "-f", "update.tar"); err != nil {
		t.Fatal(err)
	}
	whole, update := fileSize(t, v2), fileSize(t, filepath.Join(dir, "update.tar"))
	t.Logf("v2 %d bytes, its delta %d bytes, the changed image %d bytes", whole, update, changed)
	if update >= whole/2 || update < changed {
		t.Fatalf("delta of %d bytes for a package of %d whose changed image is %d", update, whole, changed)
	}
	r, err := artifact.Open(ctx, v2)
	if err != nil {
		t.Fatal(err)
	}
	root := r.Root().Digest
	if rec := deployed(filepath.Join(dir, "update.tar")); rec.Version != "2.0.0" || rec.Root != root {
		t.Fatalf("the delta deployed as %s %s, want 2.0.0 %s", rec.Version, rec.Root, root)
	}
	for i := range 4 {
		d := imageDigest(t, r, fmt.Sprintf("docker.io/delta/img%d:1.0", i))
		if code := registryStatus(ctx, t, c, fmt.Sprintf("delta/img%d", i), d); code != 200 {
			t.Fatalf("image %d of v2 in the cluster's registry: HEAD %d", i, code)
		}
	}

	// A delta against a receipt of more than the cluster holds (v3's own
	// blobs): refused before anything changes, naming what is missing.
	v3, _ := deltaPackage(ctx, t, "3.0.0", 3, priv)
	if _, err := ferry("registry", "have", v3, "-f", "all.json"); err != nil {
		t.Fatal(err)
	}
	if _, err := ferry("package", "delta", v3, "--have", "all.json", "-f", "bad.tar"); err != nil {
		t.Fatal(err)
	}
	_, err = ferry("deploy", "bad.tar", "--key", pub.Name, "--kubeconfig", c.Kubeconfig)
	if err == nil || !strings.Contains(err.Error(), "lacks") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("deploy of a delta whose rest the cluster lacks: %v", err)
	}
	st := &rollout.State{Client: c.Client, Namespace: "ferry"}
	recs, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Name == "e2e-delta" && (rec.Version != "2.0.0" || rec.Root != root) {
			t.Fatalf("after the refused delta the record says %s %s", rec.Version, rec.Root)
		}
	}
}

// deltaPackage makes version of package e2e-delta: four images of 512
// KiB of pseudo-random bytes (docker.io/delta/imgN:1.0), the last one's
// content seeded by gen (the first three the same in every version), and
// a ConfigMap naming them. It returns the archive and the changed image's
// layer size.
func deltaPackage(ctx context.Context, t *testing.T, version string, gen uint64, priv *key.Private) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	var imgs strings.Builder
	const size = 512 << 10
	for i := range 4 {
		seed := uint64(i)
		if i == 3 {
			seed = 100 + gen
		}
		data := make([]byte, size)
		rng := rand.NewChaCha8([32]byte{byte(seed)})
		_, _ = rng.Read(data)
		sub := fmt.Sprintf("img%d", i)
		layoutTagged(ctx, t, filepath.Join(dir, sub), "1.0", data, mkimg.Options{Path: "bin"})
		fmt.Fprintf(&imgs, "      - {ref: docker.io/delta/img%d:1.0, layout: %s/images}\n", i, sub)
	}
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: e2e-delta}\ndata: {version: %q}\n", version)
	if err := os.WriteFile(filepath.Join(dir, "m", "cm.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: e2e-delta, version: %s}\ncomponents:\n  - name: c\n    images:\n%s    manifests:\n      - {name: m, namespace: e2e-delta, files: [m]}\n", version, imgs.String())
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), "e2e-delta-"+version+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Output: pkg, Format: artifact.FormatTar, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg, size
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// imageDigest is the manifest digest the package records for image ref.
func imageDigest(t *testing.T, r *artifact.Reader, ref string) string {
	t.Helper()
	for _, comp := range r.Config().Components {
		for _, img := range comp.Images {
			if img.Ref == ref {
				return img.Digest.String()
			}
		}
	}
	t.Fatalf("the package has no image %s", ref)
	return ""
}
