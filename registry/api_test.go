package registry_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// call sends a request and returns the response with its body read.
func call(t *testing.T, method, url, contentType string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return send(t, req)
}

// send sends req and returns the response with its body read.
func send(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// errorCode returns the first OCI error code of an error body, or "".
func errorCode(body []byte) string {
	var e struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Errors) == 0 {
		return ""
	}
	return e.Errors[0].Code
}

// pushRepos makes repositories holding one tagged manifest each.
func pushRepos(t *testing.T, base string, names ...string) {
	t.Helper()
	empty := ocispec.DescriptorEmptyJSON
	m := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"` +
		empty.Digest.String() + `","size":2},"layers":[]}`)
	for _, name := range names {
		putBlob(t, base, name, empty.Data)
		if resp := do(t, http.MethodPut, base+"/v2/"+name+"/manifests/v1", ocispec.MediaTypeImageManifest, m); resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT %s:v1: %s", name, resp.Status)
		}
	}
}

type catalogPage struct {
	Repositories []string `json:"repositories"`
}

// TestCatalog lists repositories the ways clients ask: all at once, in pages
// through Link headers, and with a page size over the registry's limit
// (crane asks for n=1000 and more), which must shorten the page rather than
// fail.
func TestCatalog(t *testing.T) {
	ts := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()})
	repos := []string{"alpha", "bravo/one", "charlie", "delta/x/y", "echo"}
	pushRepos(t, ts.URL, repos...)

	for _, tc := range []struct {
		query    string
		want     []string
		wantLink bool
	}{
		{"", repos, false},
		{"?n=1000", repos, false},
		{"?n=100000", repos, false},
		{"?n=2", repos[:2], true},
		{"?n=2&last=bravo/one", repos[2:4], true},
		{"?last=delta/x/y", repos[4:], false},
		{"?n=0", nil, false},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, body := call(t, http.MethodGet, ts.URL+"/v2/_catalog"+tc.query, "", nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /v2/_catalog%s: %s %s", tc.query, resp.Status, body)
			}
			var page catalogPage
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(page.Repositories, tc.want) {
				t.Fatalf("repositories %v, want %v", page.Repositories, tc.want)
			}
			if got := resp.Header.Get("Link") != ""; got != tc.wantLink {
				t.Fatalf("Link header %q, want one: %v", resp.Header.Get("Link"), tc.wantLink)
			}
		})
	}
	t.Run("paging through Link", func(t *testing.T) {
		var got []string
		next := ts.URL + "/v2/_catalog?n=2"
		for i := 0; next != ""; i++ {
			if i > len(repos) {
				t.Fatalf("paging does not end: %v", got)
			}
			resp, body := call(t, http.MethodGet, next, "", nil)
			var page catalogPage
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Repositories...)
			next = ""
			if link := resp.Header.Get("Link"); link != "" {
				target, _, _ := strings.Cut(link, ";")
				u, err := resp.Request.URL.Parse(strings.Trim(target, "<> "))
				if err != nil {
					t.Fatal(err)
				}
				next = u.String()
			}
		}
		if !slices.Equal(got, repos) {
			t.Fatalf("paged %v, want %v", got, repos)
		}
	})
	t.Run("malformed n", func(t *testing.T) {
		resp, body := call(t, http.MethodGet, ts.URL+"/v2/_catalog?n=many", "", nil)
		if resp.StatusCode != http.StatusBadRequest || errorCode(body) != "PAGINATION_NUMBER_INVALID" {
			t.Fatalf("n=many: %s %s, want 400 PAGINATION_NUMBER_INVALID", resp.Status, body)
		}
	})
}

// TestMalformedRequests sends requests the spec calls malformed: each must
// get its 4xx code and OCI error, never a 5xx, and must leave nothing in
// storage (no upload session, no repository folder).
func TestMalformedRequests(t *testing.T) {
	root := t.TempDir()
	ts := registrytest.NewServer(t, registry.Config{RootDir: root})
	base := ts.URL
	pushRepos(t, base, "app")
	long := strings.Repeat("a", 256)
	manifest := func(layer string) []byte {
		return []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"` +
			ocispec.DescriptorEmptyJSON.Digest.String() + `","size":2},"layers":[` + layer + `]}`)
	}
	someDigest := digest.FromString("x").String()
	for _, tc := range []struct {
		name         string
		method, path string
		body         []byte
		status       int
		code         string
		header       http.Header // besides Content-Type: the OCI manifest type
	}{
		{"name over 255 characters: tags", http.MethodGet, "/v2/" + long + "/tags/list", nil, 400, "NAME_INVALID", nil},
		{"name over 255 characters: upload", http.MethodPost, "/v2/" + long + "/blobs/uploads/", nil, 400, "NAME_INVALID", nil},
		{"name over 255 characters: manifest", http.MethodPut, "/v2/" + long + "/manifests/v1", manifest(""), 400, "NAME_INVALID", nil},
		{"upper-case name: upload", http.MethodPost, "/v2/UPPER/app/blobs/uploads/", nil, 400, "NAME_INVALID", nil},
		{"upper-case name: manifest {}", http.MethodPut, "/v2/UPPER/app/manifests/v1", []byte("{}"), 400, "NAME_INVALID", nil},
		{"upper-case name: one component", http.MethodPut, "/v2/Upper/manifests/v1", []byte("{}"), 400, "NAME_INVALID", nil},
		{"upper-case name: blob", http.MethodGet, "/v2/app/Sub/blobs/" + someDigest, nil, 400, "NAME_INVALID", nil},
		{"host and port as name", http.MethodPost, "/v2/localhost:5000/app/blobs/uploads/", nil, 400, "NAME_INVALID", nil},
		{"name with an empty component", http.MethodGet, "/v2/a//b/tags/list", nil, 400, "NAME_INVALID", nil},
		{"mount from an invalid name", http.MethodPost, "/v2/app/blobs/uploads/?mount=" + someDigest + "&from=Other", nil, 400, "NAME_INVALID", nil},
		{"manifest {}", http.MethodPut, "/v2/app/manifests/v2", []byte("{}"), 400, "MANIFEST_INVALID", nil},
		{"manifest schemaVersion 3", http.MethodPut, "/v2/app/manifests/v2", []byte(`{"schemaVersion":3,"layers":[]}`), 400, "MANIFEST_INVALID", nil},
		{"manifest not JSON", http.MethodPut, "/v2/app/manifests/v2", []byte("not json"), 400, "MANIFEST_INVALID", nil},
		{"layer with an unsupported digest algorithm", http.MethodPut, "/v2/app/manifests/v2", manifest(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"md5:0123","size":1}`), 400, "MANIFEST_INVALID", nil},
		{"layer with a short digest", http.MethodPut, "/v2/app/manifests/v2", manifest(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:0123","size":1}`), 400, "MANIFEST_INVALID", nil},
		{"layer URL with a ftp scheme", http.MethodPut, "/v2/app/manifests/v2", manifest(`{"mediaType":"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip","digest":"` + someDigest + `","size":1,"urls":["ftp://example.com/l"]}`), 400, "MANIFEST_INVALID", nil},
		{"invalid tag: PUT", http.MethodPut, "/v2/app/manifests/-v1", manifest(""), 400, "TAG_INVALID", nil},
		{"tag over 128 characters: PUT", http.MethodPut, "/v2/app/manifests/" + strings.Repeat("t", 129), manifest(""), 400, "TAG_INVALID", nil},
		{"invalid tag: GET", http.MethodGet, "/v2/app/manifests/-v1", nil, 404, "MANIFEST_UNKNOWN", nil},
		{"manifest digest with an unknown algorithm", http.MethodGet, "/v2/app/manifests/md5:0123", nil, 400, "DIGEST_INVALID", nil},
		{"manifest digest in upper case", http.MethodGet, "/v2/app/manifests/sha256:" + strings.ToUpper(someDigest[7:]), nil, 400, "DIGEST_INVALID", nil},
		{"blob digest too short", http.MethodGet, "/v2/app/blobs/sha256:0123", nil, 400, "DIGEST_INVALID", nil},
		{"blob digest in upper case", http.MethodHead, "/v2/app/blobs/sha256:" + strings.ToUpper(someDigest[7:]), nil, 400, "", nil},
		{"upload digest unknown algorithm", http.MethodPost, "/v2/app/blobs/uploads/?digest=md5:0123", []byte("x"), 400, "DIGEST_INVALID", nil},
		{"mount of a malformed digest", http.MethodPost, "/v2/app/blobs/uploads/?mount=sha256:zz&from=other", nil, 400, "DIGEST_INVALID", nil},
		{"referrers of a malformed digest", http.MethodGet, "/v2/app/referrers/sha256:zz", nil, 400, "DIGEST_INVALID", nil},
		{"tags n not a number", http.MethodGet, "/v2/app/tags/list?n=x", nil, 400, "PAGINATION_NUMBER_INVALID", nil},
		{"chunk with a malformed Content-Range", http.MethodPatch, "upload", []byte("abc"), 416, "RANGE_INVALID", http.Header{"Content-Type": {"application/octet-stream"}, "Content-Range": {"zero-2"}}},
		{"closing PUT with a malformed Content-Range", http.MethodPut, "upload?digest=" + digest.FromString("abc").String(), []byte("abc"), 416, "RANGE_INVALID", http.Header{"Content-Type": {"application/octet-stream"}, "Content-Range": {"zero-2"}}},
		{"chunk with a JSON Content-Type", http.MethodPatch, "upload", []byte("abc"), 400, "BLOB_UPLOAD_INVALID", http.Header{"Content-Range": {"0-2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.path, "upload") {
				tc.path = openUpload(t, base, "app", tc.path)
			}
			req, err := http.NewRequest(tc.method, base+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", ocispec.MediaTypeImageManifest)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, body := send(t, req)
			if resp.StatusCode != tc.status || (tc.code != "" && errorCode(body) != tc.code) {
				t.Fatalf("%s %.80s: %s %.200s; want %d %s", tc.method, tc.path, resp.Status, body, tc.status, tc.code)
			}
		})
	}
	// Only the valid repository may exist in storage.
	var dirs []string
	repos := filepath.Join(root, "docker", "registry", "v2", "repositories")
	entries, err := os.ReadDir(repos)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if !slices.Equal(dirs, []string{"app"}) {
		t.Fatalf("repository folders %v, want only [app]", dirs)
	}
}

// openUpload opens an upload session in repo and returns its path and
// query, with rest's query (after "upload") added.
func openUpload(t *testing.T, base, repo, rest string) string {
	t.Helper()
	resp := do(t, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", "", nil)
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	if _, query, ok := strings.Cut(rest, "?"); ok {
		loc.RawQuery += "&" + query
	}
	return loc.RequestURI()
}
