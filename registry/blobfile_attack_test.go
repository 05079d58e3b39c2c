package registry

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
	"golang.org/x/crypto/bcrypt"
)

// countCalls counts the requests that reach distribution.
type countCalls struct {
	next  http.Handler
	calls atomic.Int64
}

func (c *countCalls) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.calls.Add(1)
	c.next.ServeHTTP(w, r)
}

// TestBlobFilesAsDistribution: every blob GET served through blobFiles is
// answered as distribution alone answers it (status, headers but Date,
// body), with and without accounts, whole, ranged, conditional, refused,
// unknown, odd paths; and a GET that distribution refuses costs it one
// request (one password check), not a HEAD and then the GET.
func TestBlobFilesAsDistribution(t *testing.T) {
	for _, withAuth := range []bool{false, true} {
		root := t.TempDir()
		cfg := Config{RootDir: root}
		if withAuth {
			hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
			cfg.HTPasswdFile = filepath.Join(t.TempDir(), "htpasswd")
			if err := os.WriteFile(cfg.HTPasswdFile, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		s, err := New(ctx, cfg)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		ts := httptest.NewServer(s)
		data := bytes.Repeat([]byte("ferry"), 200_000)
		d := digest.FromBytes(data)
		do := func(method, url string, body []byte) *http.Response {
			req, _ := http.NewRequest(method, url, bytes.NewReader(body))
			req.SetBasicAuth("alice", "s3cret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		resp := do(http.MethodPost, ts.URL+"/v2/team/app/blobs/uploads/", nil)
		loc, _ := resp.Location()
		q := loc.Query()
		q.Set("digest", d.String())
		loc.RawQuery = q.Encode()
		if resp := do(http.MethodPut, loc.String(), data); resp.StatusCode != http.StatusCreated {
			t.Fatalf("push: %d", resp.StatusCode)
		}
		etag := `"` + d.String() + `"`
		blob := "/v2/team/app/blobs/" + d.String()
		for _, c := range []struct {
			name, path, user, pass string
			hdr                    []string
		}{
			{"whole", blob, "alice", "s3cret", nil},
			{"query", blob + "?x=1&digest=sha256:00", "alice", "s3cret", nil},
			{"range", blob, "alice", "s3cret", []string{"Range", "bytes=10-19"}},
			{"suffix range", blob, "alice", "s3cret", []string{"Range", "bytes=-7"}},
			{"overlapping ranges", blob, "alice", "s3cret", []string{"Range", "bytes=0-999999,0-999999"}},
			{"unsatisfiable", blob, "alice", "s3cret", []string{"Range", "bytes=2000000-"}},
			{"if-none-match", blob, "alice", "s3cret", []string{"If-None-Match", etag}},
			{"if-none-match other", blob, "alice", "s3cret", []string{"If-None-Match", `"x"`}},
			{"if-match other", blob, "alice", "s3cret", []string{"If-Match", `"x"`}},
			{"if-range other", blob, "alice", "s3cret", []string{"Range", "bytes=1-2", "If-Range", `"x"`}},
			{"if-range", blob, "alice", "s3cret", []string{"Range", "bytes=1-2", "If-Range", etag}},
			{"if-modified-since", blob, "alice", "s3cret", []string{"If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT"}},
			{"no credentials", blob, "", "", nil},
			{"wrong password", blob, "alice", "guess", nil},
			{"unknown user", blob, "mallory", "guess", nil},
			{"another repository", "/v2/team/other/blobs/" + d.String(), "alice", "s3cret", nil},
			{"unknown blob", "/v2/team/app/blobs/" + digest.FromString("x").String(), "alice", "s3cret", nil},
			{"upper-case hex", "/v2/team/app/blobs/sha256:" + strings.ToUpper(d.Encoded()), "alice", "s3cret", nil},
			{"63 hex", blob[:len(blob)-1], "alice", "s3cret", nil},
			{"65 hex", blob + "0", "alice", "s3cret", nil},
			{"dot-dot", "/v2/team/x/../app/blobs/" + d.String(), "alice", "s3cret", nil},
			{"encoded slash", "/v2/team%2Fapp/blobs/" + d.String(), "alice", "s3cret", nil},
			{"odd name", "/v2/team/-app/blobs/" + d.String(), "alice", "s3cret", nil},
		} {
			answer := func(h http.Handler) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodGet, c.path, nil)
				if c.user != "" {
					req.SetBasicAuth(c.user, c.pass)
				}
				for i := 0; i+1 < len(c.hdr); i += 2 {
					req.Header.Set(c.hdr[i], c.hdr[i+1])
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w
			}
			want := answer(s.apps)
			n := &countCalls{next: s.apps}
			got := answer(&blobFiles{next: n, root: root})
			want.Header().Del("Date")
			got.Header().Del("Date")
			if c.name == "if-match other" {
				// distribution's 412 keeps the blob's Content-Length
				// with no body (a client waits for bytes that never
				// come); ServeContent's own is served.
				if want.Code != http.StatusPreconditionFailed || got.Code != want.Code || got.Header().Get("Content-Length") != "" || got.Body.Len() != 0 {
					t.Errorf("auth %v, %s: got %d %v", withAuth, c.name, got.Code, got.Header())
				}
				continue
			}
			if got.Code != want.Code || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || !equalHeaders(got.Header(), want.Header()) {
				t.Errorf("auth %v, %s: got %d %v %.100q\nwant %d %v %.100q", withAuth, c.name, got.Code, got.Header(), got.Body.Bytes(), want.Code, want.Header(), want.Body.Bytes())
			}
			if got.Code >= 400 && n.calls.Load() != 1 {
				t.Errorf("auth %v, %s: answered %d after %d requests to distribution, want 1", withAuth, c.name, got.Code, n.calls.Load())
			}
		}
		ts.Close()
		_ = s.Shutdown(context.Background())
		cancel()
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}
