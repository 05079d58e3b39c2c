package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestConfined(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("ok"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-link"))
	os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "rel-link"))
	os.Symlink("ok", filepath.Join(dir, "inside-link"))
	os.Symlink(outside, filepath.Join(dir, "dir-link"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	if b, err := ReadFile(root, "inside-link", 10); err != nil || string(b) != "ok" {
		t.Fatalf("a link inside: %q, %v", b, err)
	}
	for _, name := range []string{"abs-link", "rel-link", "dir-link/secret", "../x", "/etc/passwd", "sub/../../x"} {
		if _, err := ReadFile(root, name, 10); !errors.Is(err, ErrEscapes) {
			t.Errorf("%s: %v, want ErrEscapes", name, err)
		}
	}
	if _, err := Sub(root, "dir-link"); !errors.Is(err, ErrEscapes) {
		t.Errorf("Sub through a link out: %v, want ErrEscapes", err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(root, "fifo", 10); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("fifo: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if _, err := ReadFile(root, "ok", 1); err == nil {
		t.Error("a file over max was read")
	}
	fsys := FS(root)
	if _, err := fs.ReadFile(fsys, "abs-link"); !errors.Is(err, ErrEscapes) {
		t.Errorf("FS through a link out: %v", err)
	}
	if b, err := fs.ReadFile(fsys, "ok"); err != nil || string(b) != "ok" {
		t.Errorf("FS: %q, %v", b, err)
	}
	if _, err := fs.ReadDir(fsys, "sub"); err != nil {
		t.Errorf("ReadDir: %v", err)
	}
}

func TestReadBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 1025), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPath(big, 1024); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), big) {
		t.Errorf("1025 bytes at most 1024: %v", err)
	}
	if data, err := ReadPath(big, 1025); err != nil || len(data) != 1025 {
		t.Errorf("1025 bytes at most 1025: %d, %v", len(data), err)
	}
	// A device that never ends is refused unread, a FIFO nobody writes
	// to without blocking, a file larger than the bound from its size.
	if _, err := ReadPath("/dev/zero", 1<<20); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "/dev/zero is not a regular file (a device)") {
		t.Errorf("/dev/zero: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPath(fifo, 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a FIFO: %v", err)
	}
	if err := CheckPath(fifo, 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("CheckPath of a FIFO: %v", err)
	}
	sparse := filepath.Join(dir, "sparse")
	if err := os.WriteFile(sparse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 1<<40); err != nil {
		t.Fatal(err)
	}
	if err := CheckPath(sparse, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("CheckPath of 1 TiB: %v", err)
	}
	if err := CheckPath(filepath.Join(dir, "missing"), 10); err != nil {
		t.Errorf("CheckPath of a missing file: %v", err)
	}
	if _, err := ReadPath(dir, 10); err == nil {
		t.Error("a folder read as a file")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := ReadFile(root, "big", 1000); !errors.Is(err, ErrTooLarge) {
		t.Errorf("confined, 1025 bytes at most 1000: %v", err)
	}
}
