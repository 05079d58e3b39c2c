package atomicfile

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A write that cannot happen names the file asked for, not its temporary.
func TestErrorNamesTarget(t *testing.T) {
	target := filepath.Join(t.TempDir(), "missing", "out.bin")
	_, err := Write(target, 0o644, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
	if err == nil || !strings.Contains(err.Error(), target) || strings.Contains(err.Error(), ".tmp-") {
		t.Fatalf("%v, want an error naming %s and no temporary file", err, target)
	}
}
