package conformance_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/registry"
)

// mutation breaks one behaviour of a working registry: when match says a
// request is affected, the request may be altered before the registry sees
// it and the recorded response afterwards.
type mutation struct {
	match    func(r *http.Request) bool
	request  func(r *http.Request)
	response func(rec *httptest.ResponseRecorder)
	// checks that must catch it
	checks []string
}

func pathHas(method string, parts ...string) func(r *http.Request) bool {
	return func(r *http.Request) bool {
		if r.Method != method {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(r.URL.Path, p) {
				return false
			}
		}
		return true
	}
}

func (m mutation) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.match(r) {
			next.ServeHTTP(w, r)
			return
		}
		if m.request != nil {
			m.request(r)
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if m.response != nil {
			m.response(rec)
		}
		// Keep the framing honest whatever the mutation did to the body.
		if cl := rec.Header().Get("Content-Length"); cl != "" && cl != strconv.Itoa(rec.Body.Len()) {
			rec.Header().Set("Content-Length", strconv.Itoa(rec.Body.Len()))
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// TestSuiteCatchesBrokenRegistries wraps the embedded registry with
// deliberately wrong responses and asserts that the checks meant to notice
// each one fail.
func TestSuiteCatchesBrokenRegistries(t *testing.T) {
	mutations := map[string]mutation{
		"wrong manifest digest header": {
			match: pathHas(http.MethodGet, "/manifests/"),
			response: func(rec *httptest.ResponseRecorder) {
				rec.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("0", 64))
			},
			checks: []string{"pull/manifest-by-tag", "pull/manifest-by-digest"},
		},
		"missing blob Content-Length": {
			match:    pathHas(http.MethodGet, "/blobs/sha256:"),
			response: func(rec *httptest.ResponseRecorder) { rec.Header().Del("Content-Length") },
			checks:   []string{"pull/blob-get"},
		},
		"200 instead of 404 for an absent manifest": {
			match: pathHas(http.MethodGet, "/manifests/no-such-tag"),
			response: func(rec *httptest.ResponseRecorder) {
				rec.Code = http.StatusOK
				rec.Body.Reset()
				rec.Body.WriteString("{}")
				rec.Header().Set("Content-Length", "2")
			},
			checks: []string{"pull/manifest-unknown"},
		},
		"pagination ignores n": {
			match: pathHas(http.MethodGet, "/tags/list"),
			request: func(r *http.Request) {
				q := r.URL.Query()
				q.Del("n")
				r.URL.RawQuery = q.Encode()
			},
			response: func(rec *httptest.ResponseRecorder) { rec.Header().Del("Link") },
			checks:   []string{"discovery/tags-n", "discovery/tags-n-last", "discovery/tags-n-zero"},
		},
		"pagination drops last": {
			match: pathHas(http.MethodGet, "/tags/list"),
			request: func(r *http.Request) {
				q := r.URL.Query()
				q.Del("last")
				r.URL.RawQuery = q.Encode()
			},
			response: func(rec *httptest.ResponseRecorder) { rec.Header().Del("Link") },
			checks:   []string{"discovery/tags-n-last", "discovery/tags-paginate"},
		},
		"range ignored": {
			match:   pathHas(http.MethodGet, "/blobs/sha256:"),
			request: func(r *http.Request) { r.Header.Del("Range") },
			checks:  []string{"pull/blob-range"},
		},
		"chunk Range off by one": {
			match: pathHas(http.MethodPatch, "/blobs/uploads/"),
			response: func(rec *httptest.ResponseRecorder) {
				if end, ok := strings.CutPrefix(rec.Header().Get("Range"), "0-"); ok {
					n, _ := strconv.Atoi(end)
					rec.Header().Set("Range", "0-"+strconv.Itoa(n+1))
				}
			},
			checks: []string{"push/blob-chunked", "push/blob-large"},
		},
		"manifest PUT without Location": {
			match:    pathHas(http.MethodPut, "/manifests/"),
			response: func(rec *httptest.ResponseRecorder) { rec.Header().Del("Location") },
			checks:   []string{"push/manifest-by-tag", "push/manifest-custom-config"},
		},
		"referrers filter claimed but not applied": {
			match: pathHas(http.MethodGet, "/referrers/"),
			request: func(r *http.Request) {
				r.URL.RawQuery = ""
			},
			response: func(rec *httptest.ResponseRecorder) { rec.Header().Set("OCI-Filters-Applied", "artifactType") },
			checks:   []string{"discovery/referrers-filter"},
		},
		"referrers API missing": {
			match: pathHas(http.MethodGet, "/referrers/"),
			response: func(rec *httptest.ResponseRecorder) {
				rec.Code = http.StatusNotFound
				rec.Body.Reset()
			},
			checks: []string{"discovery/referrers-list", "discovery/referrers-empty", "management/delete-referrer"},
		},
		"blob delete ignored": {
			match: pathHas(http.MethodDelete, "/blobs/"),
			response: func(rec *httptest.ResponseRecorder) {
				rec.Code = http.StatusAccepted
			},
			request: func(r *http.Request) { r.Method = http.MethodHead },
			checks:  []string{"management/delete-blob"},
		},
	}
	for name, m := range mutations {
		t.Run(name, func(t *testing.T) {
			srv, err := registry.New(context.Background(), registry.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(m.wrap(srv))
			t.Cleanup(func() { ts.Close(); _ = srv.Shutdown(context.Background()) })
			rep, err := conformance.Run(context.Background(), conformance.Config{URL: ts.URL, Checks: m.checks, LargeBlobSize: 9 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != len(m.checks) {
				t.Fatalf("ran %d checks, want %d", len(rep.Results), len(m.checks))
			}
			for _, r := range rep.Results {
				if r.Status != conformance.Failed {
					t.Errorf("%s %s against a registry with %q; want failed", r.ID, r.Status, name)
				} else {
					t.Logf("%s caught it: %s", r.ID, r.Detail)
				}
			}
		})
	}
}
