package backup_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestRestoreRefusesBadManifestFirst: a backup (unsigned, restored without
// --key) one of whose image manifests does not match its digest is
// refused in one line naming it before any blob is pushed: the manifests
// are read and checked before the blobs go up.
func TestRestoreRefusesBadManifestFirst(t *testing.T) {
	ctx := context.Background()
	src := sourceWith(t, 2, 64<<10)
	file := filepath.Join(t.TempDir(), "b.tar")
	if _, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(file), backup.Options{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The last image manifest in the file (the package's own come first).
	cr := &countReader{r: bytes.NewReader(data)}
	tr := tar.NewReader(cr)
	var off int64 = -1
	var name string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		start := cr.n
		b, _ := io.ReadAll(tr)
		if strings.HasPrefix(h.Name, "blobs/sha256/") && bytes.Contains(b, []byte(`"layers"`)) && bytes.Contains(b, []byte(`"schemaVersion"`)) {
			off, name = start+int64(bytes.Index(b, []byte(`"schemaVersion"`)))+1, h.Name
		}
	}
	if off < 0 {
		t.Fatal("no image manifest in the backup")
	}
	data[off] = 'S' // "SchemaVersion": the same size, another digest
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dst := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))
	_, err = backup.Restore(ctx, backup.Target{Registry: registryAt(t, dst)}, []string{file}, backup.RestoreOptions{})
	if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), strings.TrimPrefix(name, "blobs/sha256/")) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restore with manifest %s changed: %v", name, err)
	}
	pushed, _ := filepath.Glob(filepath.Join(root, "docker/registry/v2/blobs/sha256/*/*/data"))
	if len(pushed) != 0 {
		t.Fatalf("a refused backup pushed %d blobs", len(pushed))
	}
	t.Logf("refused: %v", err)
}
