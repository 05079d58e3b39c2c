package registry_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestLargeUploads: blob uploads reach filesystem storage in large writes;
// a monolithic PUT and a chunked PATCH, PATCH, PUT upload both commit under
// the right digest and read back whole, and a wrong digest is refused.
func TestLargeUploads(t *testing.T) {
	ts := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()})
	rng := rand.New(rand.NewPCG(3, 4))
	blob := make([]byte, 3<<20+12345)
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	d := digest.FromBytes(blob)
	do := func(method, u string, body []byte, want int) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, u, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %s, want %d", method, u, resp.Status, want)
		}
		return resp
	}
	start := func(repo string) string {
		loc := do(http.MethodPost, ts.URL+"/v2/"+repo+"/blobs/uploads/", nil, http.StatusAccepted).Header.Get("Location")
		u, err := url.Parse(loc)
		if err != nil {
			t.Fatal(err)
		}
		return ts.URL + u.RequestURI()
	}
	withDigest := func(u string, d digest.Digest) string {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		return u + sep + "digest=" + url.QueryEscape(d.String())
	}
	// Monolithic.
	do(http.MethodPut, withDigest(start("mono"), d), blob, http.StatusCreated)
	// Chunked, with a chunk boundary off the write size.
	u := start("chunked")
	resp := do(http.MethodPatch, u, blob[:1<<20+7], http.StatusAccepted)
	next, _ := url.Parse(resp.Header.Get("Location"))
	do(http.MethodPut, withDigest(ts.URL+next.RequestURI(), d), blob[1<<20+7:], http.StatusCreated)
	for _, repo := range []string{"mono", "chunked"} {
		resp, err := ts.Client().Get(ts.URL + "/v2/" + repo + "/blobs/" + d.String())
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(got, blob) {
			t.Fatalf("%s: read back %d bytes, not the %d uploaded", repo, len(got), len(blob))
		}
	}
	// A wrong digest is refused.
	do(http.MethodPut, withDigest(start("bad"), digest.FromString("other")), blob, http.StatusBadRequest)
}
