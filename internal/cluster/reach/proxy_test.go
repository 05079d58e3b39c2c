package reach

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/testsupport/kubetest"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestTunnelThroughPodsProxy: a tunnel is the API server's pods/proxy
// when the user may use it and ferry's registry answers through it: a
// push of 48 MiB with the registry's credentials (which the API server
// would otherwise take for its own) goes up whole and reads back. An
// answer that is not ferry's registry (one older than the header that
// carries the credentials) is not taken: the port-forward is tried
// instead, and its error says why the proxy was not.
func TestTunnelThroughPodsProxy(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.New(ctx, registry.Config{RootDir: t.TempDir(), HTPasswdFile: registrytest.Htpasswd(t, "bob", "pa55")})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(&kubetest.PodsProxy{Pod: reg, Token: "kube-token"})
	defer api.Close()
	cfg := &rest.Config{Host: api.URL, BearerToken: "kube-token"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName, Namespace: "ferry"}}
	cs := fake.NewClientset(state("ferry", "127.0.0.1:1"), dep, registryPod("ferry-registry-a", "node1", true))
	cs.PrependReactor("create", "selfsubjectaccessreviews", allow(true))

	ep, err := Registry(ctx, cs, Options{Via: Tunnel, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if ep.Via != Tunnel || ep.Protocol != kube.ProtocolProxy || ep.Pod != "ferry/ferry-registry-a" || ep.ProxyError != "" {
		t.Fatalf("endpoint %+v, want the pods/proxy to ferry/ferry-registry-a", ep)
	}
	if !strings.Contains(ep.String(), "over pods/proxy") {
		t.Errorf("String() = %q", ep.String())
	}
	repo, err := remote.NewRepository(ep.Host + "/app")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	repo.Client = &auth.Client{Client: RegistryClient(), Credential: auth.StaticCredential(ep.Host, auth.Credential{Username: "bob", Password: "pa55"})}
	blob := make([]byte, 48<<20)
	rand.Read(blob)
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayer, blob)
	if err := repo.Blobs().Push(ctx, desc, bytes.NewReader(blob)); err != nil {
		t.Fatalf("push through the pods/proxy: %v (proxy: %v)", err, ep.Err())
	}
	rc, err := repo.Blobs().Fetch(ctx, desc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(back, blob) {
		t.Fatalf("read back %d of %d bytes: %v", len(back), len(blob), err)
	}
	resp, err := http.Get("http://" + ep.Host + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous GET /v2/: %s, want the registry's 401", resp.Status)
	}

	// A registry that does not read the forwarded credentials.
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	api2 := httptest.NewServer(&kubetest.PodsProxy{Pod: old, Token: "kube-token"})
	defer api2.Close()
	_, err = Registry(ctx, cs, Options{Via: Tunnel, Config: &rest.Config{Host: api2.URL, BearerToken: "kube-token"}})
	if err == nil || !strings.Contains(err.Error(), "port-forward") || !strings.Contains(err.Error(), "pods/proxy to pod ferry/ferry-registry-a: the answer (401 Unauthorized) is not the Pod's") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want the port-forward's, saying why the pods/proxy was not taken", err)
	}
}
