package artifact_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// TestArchiveStoresCompressedLayers: in a .tar.zst, gzip layers are stored in
// raw zstd blocks, and the archive is still plain zstd: the zstd CLI gives the
// same bytes as the .tar of the same package.
func TestArchiveStoresCompressedLayers(t *testing.T) {
	zstdCLI := peertool.Require(t, "zstd")
	w := newWorld(t)
	dir := t.TempDir()
	zst, tarPath := filepath.Join(dir, "demo.tar.zst"), filepath.Join(dir, "demo.tar")
	create(t, w, zst)
	create(t, w, tarPath)
	plain, err := os.ReadFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(zstdCLI, "-dc", zst).Output()
	if err != nil {
		t.Fatalf("zstd -dc: %v", err)
	}
	if !bytes.Equal(out, plain) {
		t.Fatalf("zstd -dc gave %d bytes, the .tar has %d", len(out), len(plain))
	}
	packed, err := os.ReadFile(zst)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range readTar(t, tarPath) {
		if e.Header.Name == "blobs/sha256/"+w.SharedLayer.Encoded() {
			if !bytes.Contains(packed, e.Data) {
				t.Fatal("the gzip layer is not stored as it is in the .tar.zst")
			}
			return
		}
	}
	t.Fatal("the shared layer is not in the archive")
}
