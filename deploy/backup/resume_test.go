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
	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// sourceWith pushes n images of one random layer of size bytes each.
func sourceWith(t *testing.T, n, size int) string {
	src := registrytest.New(t)
	for i := range n {
		pushImage(t, src, "team/app"+string(rune('a'+i)), "1.0.0", randomBlob(t, size))
	}
	return src
}

// interrupted writes a backup and cancels it after stop blobs.
func interrupted(t *testing.T, src string, dst backup.Destination, stop int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	_, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, dst, backup.Options{
		Now: fixedNow("2025-01-02T03:04:05Z"),
		Progress: func(p artifact.Progress) {
			if p.Phase == artifact.PhaseWrite && !p.Partial {
				if n++; n == stop {
					cancel()
				}
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted backup: %v", err)
	}
}

// TestBackupResume interrupts a backup to a file and runs it again: the
// rerun goes on where the first stopped and gives the bytes a write in one
// go gives.
func TestBackupResume(t *testing.T) {
	ctx := context.Background()
	src := sourceWith(t, 4, 1<<20)
	dir := t.TempDir()
	path := filepath.Join(dir, "b.tar")
	interrupted(t, src, backup.File(path), 8)
	if _, err := os.Stat(path); err == nil {
		t.Fatal("an interrupted backup is under its final name")
	}
	if _, err := os.Stat(path + ".partial"); err != nil {
		t.Fatalf("nothing kept for the rerun: %v", err)
	}
	res, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(path), backup.Options{Now: fixedNow("2030-01-01T00:00:00Z")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed == 0 || res.Created != "2025-01-02T03:04:05Z" {
		t.Fatalf("the rerun started over: resumed at %d, made %s", res.Resumed, res.Created)
	}
	t.Logf("resumed at byte %d of %d", res.Resumed, res.Size)
	once := filepath.Join(dir, "once.tar")
	if _, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(once), backup.Options{Now: fixedNow("2025-01-02T03:04:05Z")}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(once)
	if !bytes.Equal(a, b) {
		t.Fatalf("a resumed backup (%d bytes) differs from one written in one go (%d bytes)", len(a), len(b))
	}
	// A rerun after the registry changed starts over.
	interrupted(t, src, backup.File(path+"2"), 3)
	pushImage(t, src, "team/new", "1", randomBlob(t, 1000))
	res, err = backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(path+"2"), backup.Options{})
	if err != nil || res.Resumed != 0 {
		t.Fatalf("a rerun over a changed registry: resumed at %d, %v", res.Resumed, err)
	}
}

// TestRestoreRefusesTampered: a backup one byte of whose blobs changed, or
// signed by another key, or unsigned, is refused before anything is
// pushed.
func TestRestoreRefusesTampered(t *testing.T) {
	ctx := context.Background()
	src := sourceWith(t, 2, 64<<10)
	k := testKey(t)
	dir := t.TempDir()
	signed := filepath.Join(dir, "signed.tar")
	if _, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(signed), backup.Options{Key: k}); err != nil {
		t.Fatal(err)
	}
	unsigned := filepath.Join(dir, "unsigned.tar")
	if _, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, backup.File(unsigned), backup.Options{}); err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(dir, "tampered.tar")
	data, _ := os.ReadFile(signed)
	off := largestBlobOffset(t, data)
	data[off+100] ^= 1
	if err := os.WriteFile(tampered, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		keys       []artifact.Verifier
		want       error
	}{
		{"tampered", tampered, []artifact.Verifier{k}, artifact.ErrCorrupt},
		{"tampered without --key", tampered, nil, artifact.ErrCorrupt},
		{"another key", signed, []artifact.Verifier{testKey(t)}, artifact.ErrSignature},
		{"unsigned", unsigned, []artifact.Verifier{k}, artifact.ErrNoSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := registrytest.New(t)
			_, err := backup.Restore(ctx, backup.Target{Registry: registryAt(t, dst)}, []string{c.path}, backup.RestoreOptions{Keys: c.keys})
			if !errors.Is(err, c.want) {
				t.Fatalf("restore: %v, want %v", err, c.want)
			}
			if c.keys != nil && len(tagsOf(t, dst)) != 0 {
				t.Fatal("a refused backup pushed tags")
			}
			t.Logf("refused: %v", err)
		})
	}
}

// largestBlobOffset is where the data of the archive's largest blob starts.
func largestBlobOffset(t *testing.T, data []byte) int64 {
	cr := &countReader{r: bytes.NewReader(data)}
	tr := tar.NewReader(cr)
	var best, bestSize int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(h.Name, "blobs/sha256/") && h.Size > bestSize {
			best, bestSize = cr.n, h.Size
		}
	}
	return best
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestBackupS3 writes a backup to MinIO, interrupted and resumed as a
// multipart upload (nothing under the key until it is whole), and restores
// it from there.
func TestBackupS3(t *testing.T) {
	ctx := context.Background()
	ms := miniotest.Start(t)
	st := ms.Bucket(t)
	st.Prefix = "backups/b.tar"
	src := sourceWith(t, 3, 30<<20) // parts of 64 MiB: the first is whole after three blobs
	dst, err := backup.S3Object(st)
	if err != nil {
		t.Fatal(err)
	}
	interrupted(t, src, dst, 9)
	if _, err := backup.OpenS3(ctx, st); err == nil {
		t.Fatal("an interrupted upload left an object under the key")
	}
	dst, _ = backup.S3Object(st)
	res, err := backup.Write(ctx, backup.Source{Registry: registryAt(t, src), Name: src}, dst, backup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != backup.MinPartSize {
		t.Fatalf("resumed at %d, want after the first part (%d)", res.Resumed, backup.MinPartSize)
	}
	body, err := backup.OpenS3(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "from-s3.tar")
	f, _ := os.Create(path)
	if _, err := io.Copy(f, body); err != nil {
		t.Fatal(err)
	}
	body.Close()
	f.Close()
	if fi, _ := os.Stat(path); fi.Size() != res.Size {
		t.Fatalf("object is %d bytes, backup %d", fi.Size(), res.Size)
	}
	info, err := backup.ReadInfoS3(ctx, st)
	if err != nil || info.Root != res.Root.Digest {
		t.Fatalf("read the head from S3: %v %v", info, err)
	}
	to := registrytest.New(t)
	if _, err := backup.Restore(ctx, backup.Target{Registry: registryAt(t, to)}, []string{path}, backup.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := tagsOf(t, to), tagsOf(t, src); !equal(got, want) {
		t.Fatalf("restored %v, want %v", got, want)
	}
	var _ = registry.S3{}
}
