package backup

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/internal/scratch"
)

// A backup restored from S3 is downloaded into a scratch folder held while
// ferry lives: before, it went to $TMPDIR/ferry-restore-*.tar, which a
// ferry killed during the restore left there for good (a backup's size of
// disk); now the next ferry to make a scratch folder there removes it.
func TestLocalFilesDownloadsToScratch(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	body := strings.Repeat("x", 1<<16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "65536")
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	paths, cleanup, err := LocalFiles(context.Background(), []string{"s3://bkt/b.tar?endpoint=" + srv.URL + "&path-style=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 {
		t.Fatalf("%d paths", len(paths))
	}
	if data, err := os.ReadFile(paths[0]); err != nil || string(data) != body {
		t.Fatalf("downloaded %d bytes, %v", len(data), err)
	}
	rel, _ := filepath.Rel(tmp, paths[0])
	if first, _, _ := strings.Cut(rel, string(filepath.Separator)); !strings.HasSuffix(first, scratch.Suffix) {
		t.Errorf("downloaded to %s, not into a scratch folder (…%s) of %s", paths[0], scratch.Suffix, tmp)
	}
	cleanup()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("after cleanup %s holds %v", tmp, left)
	}
}

// A FIFO, a folder or a missing file named as a backup is refused in one
// line at once: the FIFO is opened without blocking, then looked at, so
// that one put there after a look cannot make the restore wait for a
// writer.
func TestLocalFilesRefusesOtherThanFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "b.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		fifo:                         "is not a regular file",
		dir:                          "is not a regular file",
		filepath.Join(dir, "absent"): "no such file",
	} {
		done := make(chan error, 1)
		go func() { _, _, err := LocalFiles(context.Background(), []string{name}); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v, want one line saying %q", name, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting after 10 s", name)
		}
	}
}
