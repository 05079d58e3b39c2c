package conformance_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func profileFailures(t *testing.T, cfg conformance.Config) []conformance.Result {
	t.Helper()
	cfg.Checks = conformance.Profile
	rep, err := conformance.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(conformance.Profile) {
		t.Fatalf("ran %d checks, want %d", len(rep.Results), len(conformance.Profile))
	}
	return rep.Failures()
}

func TestBasicAuth(t *testing.T) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("ci:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := registrytest.NewServer(t, registry.Config{HTPasswdFile: htpasswd})
	if f := profileFailures(t, conformance.Config{URL: ts.URL, Username: "ci", Password: "secret"}); len(f) > 0 {
		t.Fatalf("with credentials: %+v", f)
	}
	if f := profileFailures(t, conformance.Config{URL: ts.URL}); len(f) != len(conformance.Profile) {
		t.Fatalf("without credentials %d checks failed, want all %d", len(f), len(conformance.Profile))
	}
}

// TestBearerAuth puts a token service in front of the registry, the way
// Docker Hub, Harbor or GHCR ask for credentials.
func TestBearerAuth(t *testing.T) {
	srv, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	var tokenURL string
	mux := http.NewServeMux()
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ci" || p != "secret" || r.URL.Query().Get("service") != "test-registry" || r.URL.Query().Get("scope") == "" {
			http.Error(w, "denied", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"token": "tok-" + r.URL.Query().Get("scope")})
	})
	mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+tokenURL+`",service="test-registry",scope="x"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
			return
		}
		srv.ServeHTTP(w, r)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	tokenURL = ts.URL + "/token"
	if f := profileFailures(t, conformance.Config{URL: ts.URL, Username: "ci", Password: "secret"}); len(f) > 0 {
		t.Fatalf("with a token service: %+v", f)
	}
}

// TestReadOnlyPull runs the pull workflow against content stored beforehand
// with WritePullFixture, as the injector's tests do.
func TestReadOnlyPull(t *testing.T) {
	host := registrytest.New(t)
	repo, err := remote.NewRepository(host + "/preloaded/fixture")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	if err := conformance.WritePullFixture(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	rep, err := conformance.Run(context.Background(), conformance.Config{URL: "http://" + host, Repo: "preloaded/fixture", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.ByWorkflow()
	if p := c[conformance.Pull]; p.Failed != 0 || p.Skipped != 0 || p.Passed == 0 {
		t.Fatalf("pull: %s; failures %+v", p, rep.Failures())
	}
	for _, w := range []conformance.Workflow{conformance.Push, conformance.Discovery, conformance.Management} {
		if c[w].Skipped == 0 || c[w].Passed+c[w].Failed != 0 {
			t.Errorf("%s on a read-only registry: %s, want all skipped", w, c[w])
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, cfg := range []conformance.Config{
		{},
		{URL: "ftp://x"},
		{URL: "http://127.0.0.1:1", Checks: []string{"pull/no-such-check"}},
	} {
		if _, err := conformance.Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) accepted a bad config", cfg)
		}
	}
	// A password in the URL is in neither the refusal nor the report.
	for _, u := range []string{"ftp://u:hunter2@h", "https://u:hunt/er2@h", "http://u:hunter2@127.0.0.1:1"} {
		rep, err := conformance.Run(context.Background(), conformance.Config{URL: u, Checks: []string{"pull/manifest-by-digest"}})
		if err != nil && strings.Contains(err.Error(), "hunt") {
			t.Errorf("Run(%q): the error shows the password: %v", u, err)
		}
		if strings.Contains(rep.URL, "hunt") {
			t.Errorf("Run(%q): the report shows the password: %s", u, rep.URL)
		}
		if err == nil && !strings.Contains(rep.URL, "127.0.0.1:1") {
			t.Errorf("Run(%q): the report names %q", u, rep.URL)
		}
	}
}
