package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
)

// TestFreshRestore (issue 54, part 2): the backup chain TestBackupRestore
// made of the first cluster (a full backup and an increment, signed) is
// restored into a cluster started anew — three nodes, nothing of ferry's
// — after `ferry init`, from the workstation, with no other input: every
// Package comes back Ready at the root it had.
func TestFreshRestore(t *testing.T) {
	c := harness.Workstation(t)
	ctx := timeout(t, 10*time.Minute)
	readyNodes(ctx, t, c)
	carry := os.Getenv("FERRY_E2E_CARRY")
	if carry == "" {
		t.Fatal("FERRY_E2E_CARRY not set: e2e/cluster/test.sh hands phase one's backup to this test")
	}
	dir := filepath.Join(carry, "backup")
	b, err := os.ReadFile(filepath.Join(dir, "roots.json"))
	if err != nil {
		t.Fatalf("phase one's backup (TestBackupRestore leaves it): %v", err)
	}
	var want map[string]digest.Digest
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var initRes struct {
		Injected bool `json:"injected"`
	}
	if err := ferryJSON(ctx, t, c, &initRes, "init"); err != nil {
		t.Fatal(err)
	}
	if !initRes.Injected {
		t.Fatalf("init on a fresh cluster did not inject: %+v", initRes)
	}
	var list []struct {
		Name string `json:"name"`
	}
	if err := ferryJSON(ctx, t, c, &list, "list"); err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("a fresh cluster lists %v", list)
	}
	start := time.Now()
	var res backup.RestoreResult
	if err := ferryJSON(ctx, t, c, &res, "registry", "restore", "--cluster", filepath.Join(dir, "full.tar"), filepath.Join(dir, "inc.tar"), "--key", filepath.Join(dir, "backup.pub")); err != nil {
		t.Fatal(err)
	}
	t.Logf("COUNT restore into a fresh cluster: %d blobs pushed (%d bytes), %d mounted; Ready: %v in %s", res.Pushed, res.PushedSize, res.Mounted, res.Ready, time.Since(start).Round(time.Millisecond))
	var items []struct {
		Name  string        `json:"name"`
		Root  digest.Digest `json:"root"`
		Ready string        `json:"ready"`
	}
	if err := ferryJSON(ctx, t, c, &items, "list"); err != nil {
		t.Fatal(err)
	}
	got := map[string]digest.Digest{}
	for _, it := range items {
		if it.Ready != "True" {
			t.Errorf("Package %s: Ready=%s", it.Name, it.Ready)
		}
		got[it.Name] = it.Root
	}
	for n, root := range want {
		if got[n] != root {
			t.Errorf("Package %s restored at %q, backed up at %s", n, got[n], root)
		}
	}
}
