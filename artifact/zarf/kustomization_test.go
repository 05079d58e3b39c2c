package zarf_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/zarf"
)

// hostileKustomizeServer answers every request with an endless YAML body
// (kustomize's loader reads it whole: out of memory in about a second),
// counting the requests.
func hostileKustomizeServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: |\n"))
		line := []byte("    " + strings.Repeat("x", 1020) + "\n")
		// A bounded endless body: a test that fails does not take the
		// machine's memory with it.
		for i := 0; i < 64<<10 && r.Context().Err() == nil; i++ {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// writeTree writes files (slash-separated path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, s := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const kustomizeZarf = `kind: ZarfPackageConfig
metadata: {name: k}
components:
  - name: c
    required: true
    manifests:
      - name: m
        kustomizations: [k]
`

const kustomizeCM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local}\n"

// A kustomization that names anything kustomize would fetch — an http(s)
// URL, a git repository in any of kustomize's forms, a Helm repository —
// in any field its loader reads, directly or through a local base, is
// refused in one line naming the kustomization file and the URL
// (redacted), before kustomize runs: the server sees no request.
func TestConvertRefusesRemoteKustomization(t *testing.T) {
	srv, hits := hostileKustomizeServer(t)
	u := srv.URL
	for _, tc := range []struct {
		name, file, want string
		files            map[string]string
	}{
		{"resource http", "k/kustomization.yaml", "resources[0] " + u + "/remote.yaml", map[string]string{
			"k/kustomization.yaml": "resources: [" + u + "/remote.yaml]\n"}},
		{"resource with a token", "k/kustomization.yaml", "resources[1] http://xxxxx@" + strings.TrimPrefix(u, "http://") + "/r.yaml?ref=xxxxx", map[string]string{
			"k/kustomization.yaml": "resources: [cm.yaml, 'http://tok3n@" + strings.TrimPrefix(u, "http://") + "/r.yaml?ref=s3cret']\n", "k/cm.yaml": kustomizeCM}},
		{"base git over http", "k/kustomization.yaml", "bases[0] " + u + "/r.git//deploy", map[string]string{
			"k/kustomization.yaml": "bases: ['" + u + "/r.git//deploy?ref=main']\n"}},
		{"component git::", "k/kustomization.yaml", "components[0] git::" + u, map[string]string{
			"k/kustomization.yaml": "components: ['git::" + u + "/r.git']\n"}},
		{"resource github", "k/kustomization.yaml", "resources[0] github.com/org/repo//deploy", map[string]string{
			"k/kustomization.yaml": "resources: ['github.com/org/repo//deploy?ref=v1']\n"}},
		{"resource scp", "k/kustomization.yaml", "resources[0] git@github.com:org/repo", map[string]string{
			"k/kustomization.yaml": "resources: ['git@github.com:org/repo.git']\n"}},
		{"resource ssh", "k/kustomization.yaml", "resources[0] ssh://xxxxx@127.0.0.1/r.git", map[string]string{
			"k/kustomization.yaml": "resources: ['ssh://git@127.0.0.1/r.git']\n"}},
		{"helm repo", "k/kustomization.yaml", "helmCharts[0].repo " + u, map[string]string{
			"k/kustomization.yaml": "helmCharts: [{name: c, repo: '" + u + "/charts', version: 1.0.0}]\n"}},
		{"patch path", "k/kustomization.yaml", "patches[0].path " + u, map[string]string{
			"k/kustomization.yaml": "resources: [cm.yaml]\npatches: [{path: '" + u + "/p.yaml'}]\n", "k/cm.yaml": kustomizeCM}},
		{"configMapGenerator key=url", "k/kustomization.yaml", "configMapGenerator[0].files key=" + u, map[string]string{
			"k/kustomization.yaml": "configMapGenerator: [{name: g, files: ['key=" + u + "/f']}]\n"}},
		{"openapi", "k/kustomization.yaml", "openapi.path " + u, map[string]string{
			"k/kustomization.yaml": "resources: [cm.yaml]\nopenapi: {path: '" + u + "/o.json'}\n", "k/cm.yaml": kustomizeCM}},
		{"through a local base", "base/inner/kustomization.yaml", "resources[1] " + u + "/remote.yaml", map[string]string{
			"k/kustomization.yaml":          "resources: [../base]\n",
			"base/kustomization.yaml":       "resources: [inner]\n",
			"base/inner/kustomization.yaml": "resources: [cm.yaml, " + u + "/remote.yaml]\n",
			"base/inner/cm.yaml":            kustomizeCM}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.files["zarf.yaml"] = kustomizeZarf
			writeTree(t, dir, tc.files)
			file := filepath.Join(dir, "zarf.yaml")
			data, err := zarf.ReadDefinition(file)
			if err != nil {
				t.Fatal(err)
			}
			before := hits.Load()
			start := time.Now()
			_, err = zarf.Convert(file, data, zarf.ConvertOptions{Architecture: "amd64"})
			if err == nil {
				t.Fatalf("converted; the server was asked %d times", hits.Load()-before)
			}
			msg := err.Error()
			if !strings.Contains(msg, filepath.Join(dir, filepath.FromSlash(tc.file))+": "+tc.want) || !strings.Contains(msg, "is remote: convert reads only the definition's folder; vendor it into the folder") ||
				strings.Contains(msg, "\n") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "tok3n") {
				t.Fatalf("error %q, want one line naming %s and %q", msg, tc.file, tc.want)
			}
			if n := hits.Load() - before; n != 0 {
				t.Errorf("the server was asked %d times", n)
			}
			t.Logf("refused in %v: %s", time.Since(start).Round(time.Millisecond), msg)
		})
	}
}

// A kustomization whose URLs are data (an annotation, an inline patch) and
// whose local file looks like a git address converts.
func TestConvertKustomizationURLsAsData(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"zarf.yaml": kustomizeZarf,
		"k/kustomization.yaml": `resources: [cm.yaml, git@local.yaml]
commonAnnotations: {docs: "https://example.com/docs"}
patches:
  - patch: |-
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: local, annotations: {src: "https://example.com/x"}}
`,
		"k/cm.yaml":        kustomizeCM,
		"k/git@local.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
	})
	res, _ := convertDir(t, dir, zarf.ConvertOptions{Architecture: "amd64"})
	y := string(res.Files["zarf-kustomize/m-0.yaml"])
	if !strings.Contains(y, "src: https://example.com/x") || !strings.Contains(y, "name: other") {
		t.Errorf("rendered as\n%s", y)
	}
}
