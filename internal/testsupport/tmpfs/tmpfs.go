// Package tmpfs mounts small real file systems for tests that fill a disk:
// a tmpfs of a given size in a test's temporary folder, unmounted when the
// test ends.
package tmpfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size bytes on a new folder in t's temporary
// folder and returns the folder; the test's cleanup unmounts it. Mounting
// needs root (CAP_SYS_ADMIN): without it the test is skipped, or fails
// under FERRY_REQUIRE_TOOLS=1 (as CI runs).
func Mount(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size))
	if err != nil {
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
		}
		t.Skipf("mount a tmpfs of %d bytes: %v (needs root; FERRY_REQUIRE_TOOLS=1 turns this skip into a failure)", size, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file of zeros in dir until its file system is full,
// leaving about keep bytes free, and returns the file's path.
func Fill(t testing.TB, dir string, keep int64) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	p := filepath.Join(dir, "filler")
	if free > keep {
		if err := os.WriteFile(p, make([]byte, free-keep), 0o644); err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return p
}
