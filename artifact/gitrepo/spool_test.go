package gitrepo

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestKilledCreateSpoolSwept: a create from git killed (SIGKILL) while it
// spools a repository's tree leaves its ferry-git-* file behind, and the
// next create that makes a temporary in the same folder removes it.
func TestKilledCreateSpoolSwept(t *testing.T) {
	def := largeRepository(t, 32<<20, zeros)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FERRY_GITREPO_CREATE="+def, "FERRY_GITREPO_OUT="+filepath.Join(t.TempDir(), "pkg.tar.zst"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var spool []string
	for deadline := time.Now().Add(time.Minute); len(spool) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		spool, _ = filepath.Glob(filepath.Join(tmp, "ferry-git-*"))
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(spool) == 0 {
		t.Fatal("the create never spooled the repository's tree")
	}
	for _, p := range spool {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the killed create's spool %s is already gone (%v): nothing to prove", p, err)
		}
	}

	runCreate(t, def)
	for _, p := range spool {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the killed create's spool %s is left after the next create: %v", filepath.Base(p), err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
		t.Errorf("left in the temporary folder: %v", left)
	}
}
