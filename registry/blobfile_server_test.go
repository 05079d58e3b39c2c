package registry_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestBlobFilesThroughServer: on a registry on filesystem storage with
// accounts, a blob comes whole from the repository that holds it, and
// nowhere else: without credentials 401 with the challenge, from a
// repository that does not hold it 404 BLOB_UNKNOWN, as distribution says.
func TestBlobFilesThroughServer(t *testing.T) {
	srv := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir(), HTPasswdFile: registrytest.Htpasswd(t, "alice", "s3cret")})
	data := bytes.Repeat([]byte("ferry"), 200_000) // 1 MB
	d := digest.FromBytes(data)
	do := func(method, path string, body []byte, user bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		if body == nil {
			req.Body = nil
		}
		if user {
			req.SetBasicAuth("alice", "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := do(http.MethodPost, "/v2/team/app/blobs/uploads/", nil, true)
	resp.Body.Close()
	loc, err := resp.Location()
	if resp.StatusCode != http.StatusAccepted || err != nil {
		t.Fatalf("start the push: %d %v", resp.StatusCode, err)
	}
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	resp = do(http.MethodPut, loc.RequestURI(), data, true)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push: %d", resp.StatusCode)
	}
	resp = do(http.MethodGet, "/v2/team/app/blobs/"+d.String(), nil, true)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, data) || resp.Header.Get("Docker-Content-Digest") != d.String() {
		t.Fatalf("GET: %d, %d bytes, %v", resp.StatusCode, len(got), resp.Header)
	}
	resp = do(http.MethodGet, "/v2/team/app/blobs/"+d.String(), nil, false)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("GET without credentials: %d %v", resp.StatusCode, resp.Header)
	}
	resp = do(http.MethodGet, "/v2/team/other/blobs/"+d.String(), nil, true)
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !bytes.Contains(got, []byte("BLOB_UNKNOWN")) {
		t.Fatalf("GET from a repository without it: %d %s", resp.StatusCode, got)
	}
}
