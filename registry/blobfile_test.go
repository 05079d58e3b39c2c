package registry

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestBlobFiles: a blob GET that distribution answers 200 as a HEAD is
// served from the blob's file (whole, a range, or 304 to its ETag) with
// distribution's headers; any other answer, or a file missing or of
// another size, leaves the GET to distribution.
func TestBlobFiles(t *testing.T) {
	root := t.TempDir()
	data := []byte("0123456789abcdefghij")
	d := digest.FromBytes(data)
	file := filepath.Join(root, "docker", "registry", "v2", "blobs", "sha256", d.Encoded()[:2], d.Encoded(), "data")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var headStatus int
	var headSize int
	var gets int
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			if r.Header.Get("Range") != "" || r.Header.Get("If-None-Match") != "" {
				t.Errorf("the HEAD carries Range %q, If-None-Match %q", r.Header.Get("Range"), r.Header.Get("If-None-Match"))
			}
			w.Header().Set("Docker-Content-Digest", path.Base(r.URL.Path)) // the one asked for
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Etag", `"`+d.String()+`"`)
			w.Header().Set("Content-Length", strconv.Itoa(headSize))
			w.WriteHeader(headStatus)
			return
		}
		gets++
		w.WriteHeader(http.StatusTeapot)
	})
	srv := httptest.NewServer(&blobFiles{next: next, root: root})
	defer srv.Close()
	get := func(path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	blob := "/v2/a/b/blobs/" + d.String()

	headStatus, headSize = http.StatusOK, len(data)
	resp, body := get(blob)
	if resp.StatusCode != 200 || body != string(data) || resp.Header.Get("Docker-Content-Digest") != d.String() || resp.Header.Get("Content-Length") != strconv.Itoa(len(data)) {
		t.Fatalf("GET: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = get(blob, "Range", "bytes=2-5")
	if resp.StatusCode != http.StatusPartialContent || body != "2345" || resp.Header.Get("Content-Range") != "bytes 2-5/20" {
		t.Fatalf("GET a range: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, _ = get(blob, "If-None-Match", `"`+d.String()+`"`)
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("GET with its ETag: %d", resp.StatusCode)
	}
	if gets != 0 {
		t.Fatalf("distribution served %d GETs the file could", gets)
	}

	for _, c := range []struct {
		name   string
		status int
		size   int
		path   string
	}{
		{"another size", http.StatusOK, len(data) + 1, blob},
		{"no file", http.StatusOK, len(data), "/v2/a/b/blobs/" + digest.FromString("other").String()},
		{"not sha256", http.StatusOK, len(data), "/v2/a/b/blobs/" + digest.SHA512.FromBytes(data).String()},
		{"an upload", http.StatusOK, len(data), "/v2/a/b/blobs/uploads/x"},
	} {
		gets = 0
		headStatus, headSize = c.status, c.size
		if resp, _ := get(c.path); resp.StatusCode != http.StatusTeapot || gets != 1 {
			t.Errorf("%s: %d after %d GETs to distribution, want its answer", c.name, resp.StatusCode, gets)
		}
	}
	// A refusal is the HEAD's answer: distribution is not asked twice.
	for _, status := range []int{http.StatusUnauthorized, http.StatusNotFound} {
		gets = 0
		headStatus, headSize = status, len(data)
		if resp, _ := get(blob); resp.StatusCode != status || gets != 0 {
			t.Errorf("refused %d: %d after %d GETs to distribution, want the HEAD's answer", status, resp.StatusCode, gets)
		}
	}
}
