package registry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
)

// TestPeerToolsUseReferrersAPI pushes an artifact with a subject with oras
// and regctl and lists it back with both: each must find the other's
// referrer through the referrers API (not the tag-schema fallback).
func TestPeerToolsUseReferrersAPI(t *testing.T) {
	oras := peertool.Require(t, "oras")
	regctl := peertool.Require(t, "regctl")
	srv, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var referrerGETs atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/referrers/") {
			referrerGETs.Add(1)
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { ts.Close(); _ = srv.Shutdown(context.Background()) })
	host := strings.TrimPrefix(ts.URL, "http://")
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "DOCKER_CONFIG="+filepath.Join(dir, ".docker"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.txt"), []byte("subject"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sbom.json"), []byte(`{"sbom":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	subject := host + "/app:v1"
	regHost := "--host=reg=" + host + ",tls=disabled"
	run(oras, "push", "--plain-http", "--artifact-type", "application/vnd.example.app", subject, "app.txt")
	run(oras, "attach", "--plain-http", "--artifact-type", "application/vnd.example.sbom", subject, "sbom.json")
	run(regctl, "artifact", "put", regHost, "--artifact-type", "application/vnd.example.sig", "--subject", subject, "--file", "app.txt")

	if out := run(regctl, "artifact", "list", regHost, "--format", "{{range .Descriptors}}{{.ArtifactType}} {{end}}", subject); !strings.Contains(out, "application/vnd.example.sbom") || !strings.Contains(out, "application/vnd.example.sig") {
		t.Fatalf("regctl artifact list: %q, want both referrers", out)
	}
	if out := run(regctl, "artifact", "list", regHost, "--filter-artifact-type", "application/vnd.example.sig", "--format", "{{range .Descriptors}}{{.ArtifactType}} {{end}}", subject); strings.TrimSpace(out) != "application/vnd.example.sig" {
		t.Fatalf("regctl artifact list --filter-artifact-type: %q", out)
	}
	if out := run(oras, "discover", "--plain-http", "--format", "json", subject); !strings.Contains(out, "application/vnd.example.sbom") || !strings.Contains(out, "application/vnd.example.sig") {
		t.Fatalf("oras discover: %s", out)
	}
	if referrerGETs.Load() == 0 {
		t.Fatal("no client called the referrers API")
	}
	// With a referrers API, clients must not have written the fallback tag.
	if out := run(oras, "repo", "tags", "--plain-http", host+"/app"); strings.Contains(out, "sha256-") {
		t.Fatalf("a client fell back to the referrers tag schema: tags %q", out)
	}
}

// TestPeerToolsListRepositories lists a registry's repositories with crane,
// oras and regctl: each must print every repository and exit 0.
func TestPeerToolsListRepositories(t *testing.T) {
	tools := map[string]func(host string) []string{
		"crane": func(host string) []string { return []string{"catalog", "--insecure", host} },
		"oras":  func(host string) []string { return []string{"repo", "ls", "--plain-http", host} },
		"regctl": func(host string) []string {
			return []string{"repo", "ls", "--host=reg=" + host + ",tls=disabled", host}
		},
	}
	ts := httptest.NewServer(mustNew(t, registry.Config{RootDir: t.TempDir()}))
	t.Cleanup(ts.Close)
	host := strings.TrimPrefix(ts.URL, "http://")
	repos := []string{"app", "library/nginx", "org/team/tool"}
	pushRepos(t, ts.URL, repos...)
	for _, name := range []string{"crane", "oras", "regctl"} {
		t.Run(name, func(t *testing.T) {
			bin := peertool.Require(t, name)
			dir := t.TempDir()
			cmd := exec.Command(bin, tools[name](host)...)
			cmd.Env = append(os.Environ(), "HOME="+dir, "DOCKER_CONFIG="+filepath.Join(dir, ".docker"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", name, strings.Join(cmd.Args[1:], " "), err, out)
			}
			if got := strings.Fields(string(out)); !slices.Equal(got, repos) {
				t.Fatalf("%s listed %q, want %v", name, out, repos)
			}
		})
	}
}

func mustNew(t *testing.T, cfg registry.Config) *registry.Server {
	t.Helper()
	srv, err := registry.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}
