package backup

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
