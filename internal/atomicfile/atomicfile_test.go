package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/diskspace"
	"github.com/ferrypkg/ferry/internal/testsupport/tmpfs"
)

// A write that cannot happen names the file asked for, not its temporary.
func TestErrorNamesTarget(t *testing.T) {
	target := filepath.Join(t.TempDir(), "missing", "out.bin")
	_, err := Write(target, 0o644, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
	if err == nil || !strings.Contains(err.Error(), target) || strings.Contains(err.Error(), ".tmp-") {
		t.Fatalf("%v, want an error naming %s and no temporary file", err, target)
	}
}

// A write that fills its file system fails in one line naming the file and
// the room left, and leaves neither the file nor its temporary behind.
func TestFullFileSystem(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	target := filepath.Join(dir, "out.bin")
	_, err := Write(target, 0o644, func(w io.Writer) error {
		_, err := w.Write(make([]byte, 2<<20))
		return err
	})
	var fe *diskspace.FullError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), "free of 1.0 MiB") {
		t.Fatalf("%v, want a FullError naming %s and its free space", err, target)
	}
	if fe.Usage.Free < 1<<20-64<<10 {
		t.Errorf("%d bytes free after the failed write, want the temporary file's room back", fe.Usage.Free)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
