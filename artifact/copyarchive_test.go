package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestCopyIntoArchive: an Archive is Copy's destination for a package
// written whole — what Pull and Verify copy into. From a registry it gives
// the bytes create wrote, checks the signature before it writes (a wrong
// key leaves no file), and is refused as a plain oras target; keys are
// refused for a destination that cannot check them.
func TestCopyIntoArchive(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	dir := t.TempDir()
	priv, pub := keyPair(t, dir, "archive")
	_, other := keyPair(t, dir, "other")
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	created, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(dir, "p.tar.zst"), SignKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	repo := remoteRepo(t, w.Host+"/archive/app:1.0.0")
	if _, err := artifact.Copy(ctx, openPkg(t, created.Path), "", repo, "1.0.0", artifact.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(created.Path)
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	var ev events
	a := artifact.ArchiveTo(&buf, artifact.FormatTarZstd)
	res, err := artifact.Copy(ctx, repo, "1.0.0", a, "", artifact.CopyOptions{Keys: []artifact.Verifier{pub}, Progress: ev.record()})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) || a.Size() != int64(len(want)) {
		t.Errorf("the archive copied from the registry: %d bytes (Size %d), not the %d create wrote", buf.Len(), a.Size(), len(want))
	}
	if res.Root.Digest != created.Root.Digest || res.Copied != created.Blobs || len(ev.blobs) != created.Blobs || ev.bytes != res.BytesCopied {
		t.Errorf("result %+v, events for %d blobs, %d bytes; want the root %s and its %d blobs", res, len(ev.blobs), ev.bytes, created.Root.Digest, created.Blobs)
	}
	if _, err := artifact.Copy(ctx, repo, "1.0.0", a, "", artifact.CopyOptions{}); err == nil {
		t.Error("an Archive took a second package")
	}

	out := filepath.Join(dir, "wrong-key.tar.zst")
	if _, err := artifact.Copy(ctx, repo, "1.0.0", artifact.ArchiveFile(out, ""), "", artifact.CopyOptions{Keys: []artifact.Verifier{other}}); !errors.Is(err, artifact.ErrSignature) {
		t.Errorf("copy with another key: %v, want ErrSignature", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused copy left %s: %v", out, err)
	}

	if _, err := oras.Copy(ctx, repo, "1.0.0", artifact.ArchiveTo(&buf, artifact.FormatTar), "", oras.DefaultCopyOptions); !errors.Is(err, errdef.ErrUnsupported) {
		t.Errorf("oras.Copy into an Archive: %v, want ErrUnsupported", err)
	}
	if _, err := artifact.Copy(ctx, openPkg(t, created.Path), "", repo, "1.0.0", artifact.CopyOptions{Keys: []artifact.Verifier{pub}}); !errors.Is(err, errdef.ErrUnsupported) {
		t.Errorf("keys for a copy to a registry: %v, want ErrUnsupported", err)
	}
}
