package diskspace_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrypkg/ferry/internal/diskspace"
	"github.com/ferrypkg/ferry/internal/testsupport/tmpfs"
)

// A real full file system: the write's error becomes one line naming the
// file and the room left, and still says ENOSPC to errors.Is.
func TestExplainFullFileSystem(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	target := filepath.Join(dir, "big.bin")
	err := os.WriteFile(target, make([]byte, 2<<20), 0o644)
	if !diskspace.IsFull(err) {
		t.Fatalf("write 2 MiB on a 1 MiB tmpfs: %v, want ENOSPC", err)
	}
	os.Remove(target)
	err = diskspace.Explain(target, 1<<20, fmt.Errorf("tar: %w", err))
	var fe *diskspace.FullError
	if !errors.As(err, &fe) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("%v, want a FullError wrapping ENOSPC", err)
	}
	msg := err.Error()
	for _, want := range []string{target, "file system full", "1.0 MiB free of 1.0 MiB", "the 1.0 MiB written were removed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("%q is not one line", msg)
	}
}

func TestExplainLeavesOtherErrors(t *testing.T) {
	other := errors.New("boom")
	if got := diskspace.Explain("/x", 0, other); got != other {
		t.Fatalf("got %v", got)
	}
	if diskspace.Explain("/x", 0, nil) != nil {
		t.Fatal("nil became an error")
	}
}

func TestOfMissingPathMeasuresParent(t *testing.T) {
	u, err := diskspace.Of(filepath.Join(t.TempDir(), "not", "yet"))
	if err != nil || u.Total <= 0 {
		t.Fatalf("%+v %v", u, err)
	}
}
