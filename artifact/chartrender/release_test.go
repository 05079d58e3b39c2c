package chartrender_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"

	artchart "github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/chartrender"
)

// apiServer is the little of a Kubernetes API server a dry-run install
// reads: its version, its APIs, Secrets (Helm's releases) and ConfigMaps
// (a template's lookup). It records the requests that are not reads.
type apiServer struct {
	mu         sync.Mutex
	configMaps map[string]map[string]any // by namespace/name
	secrets    []map[string]any
	writes     []string
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method != http.MethodGet {
		s.writes = append(s.writes, r.Method+" "+r.URL.Path)
		http.Error(w, "read only", http.StatusMethodNotAllowed)
		return
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	p := r.URL.Path
	switch {
	case p == "/version":
		reply(map[string]any{"major": "1", "minor": "35", "gitVersion": "v1.35.4"})
	case p == "/api":
		reply(map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	case p == "/apis":
		reply(map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{}})
	case p == "/api/v1":
		reply(map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{
			map[string]any{"name": "configmaps", "namespaced": true, "kind": "ConfigMap", "verbs": []string{"get", "list"}},
			map[string]any{"name": "secrets", "namespaced": true, "kind": "Secret", "verbs": []string{"get", "list"}},
		}})
	case strings.HasSuffix(p, "/secrets"):
		reply(map[string]any{"kind": "SecretList", "apiVersion": "v1", "metadata": map[string]any{}, "items": s.secrets})
	case strings.Contains(p, "/configmaps/"):
		ns, name, _ := strings.Cut(strings.TrimPrefix(p, "/api/v1/namespaces/"), "/configmaps/")
		if cm, ok := s.configMaps[ns+"/"+name]; ok {
			reply(cm)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
	default:
		http.NotFound(w, r)
	}
}

// deployed stores a deployed revision 1 of release name in namespace, as
// Helm's Secret storage holds it.
func (s *apiServer) deployed(t *testing.T, name, namespace string) {
	t.Helper()
	rel := &release.Release{
		Name: name, Namespace: namespace, Version: 1,
		Info:  &release.Info{Status: release.StatusDeployed},
		Chart: &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: "app", Version: "1.0.0"}},
	}
	data, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets = append(s.secrets, map[string]any{
		"metadata": map[string]any{"name": "sh.helm.release.v1." + name + ".v1", "namespace": namespace,
			"labels": map[string]any{"owner": "helm", "name": name, "status": "deployed", "version": "1"}},
		"type": "helm.sh/release.v1",
		"data": map[string]any{"release": base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString(gz.Bytes())))},
	})
}

// kubeconfig writes a kubeconfig for the server at url.
func kubeconfig(t *testing.T, url string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, p, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+url+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: here, context: {cluster: c, user: u}}]
current-context: elsewhere
`)
	return p
}

// TestRenderRelease: a release is rendered as its install or upgrade in
// the cluster will render it — `lookup` reads the cluster, an upgrade is
// an upgrade — so that a chart hostile only there is refused; nothing is
// written to the cluster.
func TestRenderRelease(t *testing.T) {
	ctx := context.Background()
	api := &apiServer{configMaps: map[string]map[string]any{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r := &chartrender.Limited{Limits: hostileLimits, Cluster: chartrender.Cluster{Kubeconfig: kubeconfig(t, srv.URL), Context: "here"}}

	dir := t.TempDir()
	writeChart(t, dir, "app", map[string]string{"templates/a.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data:
  upgrade: "{{ .Release.IsUpgrade }}"
  kube: "{{ .Capabilities.KubeVersion.Version }}"
{{- if lookup "v1" "ConfigMap" .Release.Namespace "trigger" }}
  boom: {{ repeat 1073741824 "x" }}
{{- end }}
{{- if and .Release.IsUpgrade .Values.boomOnUpgrade }}
  boom: {{ repeat 1073741824 "x" }}
{{- end }}
`})
	archive, _, err := artchart.Packager{}.PackageChart(ctx, os.DirFS(filepath.Join(dir, "charts")), "app", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	rel := chartrender.Release{Name: "app", Namespace: "shop", Values: map[string]any{"boomOnUpgrade": true}}
	if err := r.RenderRelease(ctx, archive, rel); err != nil {
		t.Fatalf("install: %v", err)
	}
	// Client-only, the chart renders; in the cluster its lookup finds
	// the trigger.
	api.configMaps["shop/trigger"] = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "trigger", "namespace": "shop"}}
	var le *chartrender.LimitError
	if err := r.RenderRelease(ctx, archive, rel); !errors.As(err, &le) || le.Resource != "memory" {
		t.Fatalf("install, the trigger there: %v, want a refusal at the memory limit", err)
	}
	delete(api.configMaps, "shop/trigger")
	api.deployed(t, "app", "shop")
	rel.Upgrade = true
	if err := r.RenderRelease(ctx, archive, rel); !errors.As(err, &le) || le.Resource != "memory" {
		t.Fatalf("upgrade: %v, want a refusal at the memory limit", err)
	} else {
		t.Logf("upgrade: %v", err)
	}
	rel.Values = nil
	if err := r.RenderRelease(ctx, archive, rel); err != nil {
		t.Fatalf("upgrade without boomOnUpgrade: %v", err)
	}
	if len(api.writes) > 0 {
		t.Errorf("the cluster was written to: %q", api.writes)
	}

	r.Cluster.Context = "nowhere"
	err = r.RenderRelease(ctx, archive, rel)
	t.Logf("an unknown context: %v", err)
	if err == nil || !strings.Contains(err.Error(), "nowhere") || strings.Contains(err.Error(), "\n") {
		t.Errorf("an unknown context: %v", err)
	}
}
