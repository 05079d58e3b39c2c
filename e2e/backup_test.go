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

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
)

// TestBackupRestore (issue 54, part 2): two packages deployed into the
// e2e cluster, its registry backed up (signed) to a file, the packages
// removed (their blobs collected), then restored: every Package Ready at
// the same root digest. A new version of one package deployed, an
// incremental backup carries only its new blobs; removed again, the chain
// restored brings the new version back. (Restoring into another cluster
// needs a second cluster with a node: the centre's has none.)
func TestBackupRestore(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 25*time.Minute)
	bin := binDir(t)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin}); err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	names := []string{"e2e-backup-a", "e2e-backup-b"}
	t.Cleanup(func() {
		for _, n := range names {
			forgetPackage(context.Background(), t, c, n)
		}
	})
	dir := t.TempDir()
	run := func(cmd *exec.Cmd) (string, error) {
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=pw")
		out, err := cmd.Output()
		if err != nil {
			return string(out), fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(exitStderr(err)))
		}
		return string(out), nil
	}
	ferry := filepath.Join(bin, "ferry")
	here := func(args ...string) string { // on the e2e cluster
		t.Helper()
		out, err := run(exec.CommandContext(ctx, ferry, append(args, "--kubeconfig", c.Kubeconfig)...))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	listed := func(out string) map[string]digest.Digest {
		t.Helper()
		var items []struct {
			Name  string        `json:"name"`
			Root  digest.Digest `json:"root"`
			Ready string        `json:"ready"`
		}
		if err := json.Unmarshal([]byte(out), &items); err != nil {
			t.Fatalf("ferry list printed %s: %v", out, err)
		}
		m := map[string]digest.Digest{}
		for _, it := range items {
			if strings.HasPrefix(it.Name, "e2e-backup-") {
				if it.Ready != "True" {
					t.Fatalf("Package %s: Ready=%s", it.Name, it.Ready)
				}
				m[it.Name] = it.Root
			}
		}
		return m
	}

	// wipe removes the packages: their objects, and their blobs from the
	// registry (remove collects its garbage): what restore must bring back.
	wipe := func() {
		t.Helper()
		here(append([]string{"remove"}, names...)...)
		if left := listed(here("list", "-o", "json")); len(left) != 0 {
			t.Fatalf("removed, yet listed: %v", left)
		}
	}

	pkgs := map[string]string{}
	for i, n := range names {
		pkgs[n] = backupPackage(ctx, t, n, "1.0.0", uint64(10*i+1), priv)
		here("deploy", pkgs[n], "--key", pub.Name)
	}
	deployed := listed(here("list", "-o", "json"))
	if len(deployed) != 2 {
		t.Fatalf("deployed %v", deployed)
	}

	start := time.Now()
	var full backup.Result
	if err := json.Unmarshal([]byte(here("registry", "backup", "--cluster", "-f", "full.tar", "--key", priv.Name, "-o", "json")), &full); err != nil {
		t.Fatal(err)
	}
	t.Logf("full backup: %d repositories, %d tags, %d Packages, %d keys; %d blobs, %d bytes in %s", full.Repositories, full.Tags, full.Packages, full.Keys, full.Carried, full.Size, time.Since(start).Round(time.Millisecond))
	if full.Packages < 2 || full.Keys < 1 || !full.Signed {
		t.Fatalf("full backup: %+v", full)
	}
	if _, err := run(exec.CommandContext(ctx, ferry, "package", "verify", "full.tar", "--key", pub.Name)); err != nil {
		t.Fatal(err)
	}

	// Everything removed (the registry garbage-collected), then restored.
	wipe()
	start = time.Now()
	var res backup.RestoreResult
	if err := json.Unmarshal([]byte(here("registry", "restore", "--cluster", filepath.Join(dir, "full.tar"), "--key", pub.Name, "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore: %d blobs pushed (%d bytes), %d mounted; Ready: %v in %s", res.Pushed, res.PushedSize, res.Mounted, res.Ready, time.Since(start).Round(time.Millisecond))
	restored := listed(here("list", "-o", "json"))
	for _, n := range names {
		if restored[n] == "" || restored[n] != deployed[n] {
			t.Fatalf("Package %s restored at %q, deployed at %s", n, restored[n], deployed[n])
		}
	}

	// A new version of a: the incremental backup carries only what v2 has
	// that v1 had not (one image, the manifests, the package's own blobs).
	v2 := backupPackage(ctx, t, names[0], "2.0.0", 2, priv)
	here("deploy", v2, "--key", pub.Name)
	want := newBlobs(ctx, t, pkgs[names[0]], v2)
	var inc backup.Result
	if err := json.Unmarshal([]byte(here("registry", "backup", "--cluster", "-f", "inc.tar", "--since", "full.tar", "--key", priv.Name, "-o", "json")), &inc); err != nil {
		t.Fatal(err)
	}
	t.Logf("incremental backup: %d blobs carried (%d bytes), %d left to the full one (%d bytes); v2 has %d blobs v1 had not; archive %d bytes",
		inc.Carried, inc.CarriedSize, inc.Omitted, inc.OmittedSize, want, inc.Size)
	if inc.Carried != want {
		t.Fatalf("the incremental backup carried %d blobs, want the %d that v2 added", inc.Carried, want)
	}
	now := listed(here("list", "-o", "json"))
	wipe()
	// An increment alone is refused, naming the backup it extends.
	if _, err := run(exec.CommandContext(ctx, ferry, "registry", "restore", "--cluster", filepath.Join(dir, "inc.tar"), "--kubeconfig", c.Kubeconfig)); err == nil || !strings.Contains(err.Error(), "full.tar") {
		t.Fatalf("an increment alone: %v", err)
	}
	here("registry", "restore", "--cluster", filepath.Join(dir, "full.tar"), filepath.Join(dir, "inc.tar"), "--key", pub.Name)
	restored = listed(here("list", "-o", "json"))
	if restored[names[0]] != now[names[0]] {
		t.Fatalf("after the chain %s is at %s, it was at %s", names[0], restored[names[0]], now[names[0]])
	}
	carryBackup(t, dir, pub.Name, now)
}

// carryBackup leaves the chain (full.tar, inc.tar in dir), its public key
// and the roots it restores in $FERRY_E2E_CARRY/backup, for
// TestFreshRestore on a cluster started anew (e2e/cluster/test.sh).
func carryBackup(t *testing.T, dir, pub string, roots map[string]digest.Digest) {
	t.Helper()
	carry := os.Getenv("FERRY_E2E_CARRY")
	if carry == "" {
		return
	}
	out := filepath.Join(carry, "backup")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dir, "full.tar"), filepath.Join(dir, "inc.tar"), pub} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		if f == pub {
			name = "backup.pub"
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(roots)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "roots.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// newBlobs counts the blobs of package v2 that package v1 does not hold.
func newBlobs(ctx context.Context, t *testing.T, v1, v2 string) int {
	t.Helper()
	have := func(p string) *artifact.Receipt {
		r, err := artifact.Open(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := artifact.Have(ctx, r, "")
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	a, b := have(v1), have(v2)
	n := 0
	for d := range b.Blobs {
		if _, ok := a.Blobs[d]; !ok {
			n++
		}
	}
	return n
}

// backupPackage makes package name at version: two images (the second's
// layer changes with gen) and a ConfigMap naming the version, signed.
func backupPackage(ctx context.Context, t *testing.T, name, version string, gen uint64, priv *key.Private) string {
	t.Helper()
	dir := t.TempDir()
	var imgs strings.Builder
	for i := range 2 {
		seed := uint64(i) + 1000*uint64(len(name))
		if i == 1 {
			seed = 500 + gen
		}
		data := make([]byte, 256<<10)
		_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(data)
		sub := fmt.Sprintf("img%d", i)
		layoutTagged(ctx, t, filepath.Join(dir, sub), "1.0", data, mkimg.Options{Path: "bin"})
		fmt.Fprintf(&imgs, "      - {ref: docker.io/%s/img%d:1.0, layout: %s/images}\n", name, i, sub)
	}
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {version: %q}\n", name, version)
	if err := os.WriteFile(filepath.Join(dir, "m", "cm.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: %s}\ncomponents:\n  - name: c\n    images:\n%s    manifests:\n      - {name: m, namespace: %s, files: [m]}\n", name, version, imgs.String(), name)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), name+"-"+version+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Output: pkg, Format: artifact.FormatTar, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg
}
