package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func pushBlob(ctx context.Context, repo *remote.Repository, data []byte) error {
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: int64(len(data))}
	return repo.Push(ctx, desc, bytes.NewReader(data))
}

func TestHTPasswd(t *testing.T) {
	ctx := context.Background()
	ts := registrytest.NewServer(t, registry.Config{HTPasswdFile: registrytest.Htpasswd(t, "alice", "s3cret")})
	host := registrytest.Host(ts)

	newRepo := func(t *testing.T, client remote.Client) *remote.Repository {
		repo, err := remote.NewRepository(host + "/private/app")
		if err != nil {
			t.Fatal(err)
		}
		repo.PlainHTTP = true
		repo.Client = client
		return repo
	}
	t.Run("anonymous push refused", func(t *testing.T) {
		if err := pushBlob(ctx, newRepo(t, &auth.Client{}), []byte("anon")); err == nil {
			t.Fatal("anonymous push succeeded")
		}
		resp := do(t, http.MethodPost, ts.URL+"/v2/private/app/blobs/uploads/", "", nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("anonymous POST upload: %s, want 401", resp.Status)
		}
	})
	t.Run("wrong password refused", func(t *testing.T) {
		c := &auth.Client{Credential: auth.StaticCredential(host, auth.Credential{Username: "alice", Password: "nope"})}
		if err := pushBlob(ctx, newRepo(t, c), []byte("wrong")); err == nil {
			t.Fatal("push with a wrong password succeeded")
		}
	})
	t.Run("static credential", func(t *testing.T) {
		c := &auth.Client{Credential: auth.StaticCredential(host, auth.Credential{Username: "alice", Password: "s3cret"})}
		if err := pushBlob(ctx, newRepo(t, c), []byte("static")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("docker config file", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.json")
		store, err := credentials.NewStore(cfg, credentials.StoreOptions{AllowPlaintextPut: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, host, auth.Credential{Username: "alice", Password: "s3cret"}); err != nil {
			t.Fatal(err)
		}
		c := &auth.Client{Credential: credentials.Credential(store)}
		if err := pushBlob(ctx, newRepo(t, c), []byte("docker config")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("referrers need credentials", func(t *testing.T) {
		resp, err := http.Get(ts.URL + "/v2/private/app/referrers/" + digest.FromString("x").String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("anonymous referrers: %s, WWW-Authenticate %q; want 401 with a challenge", resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, cfg := range map[string]registry.Config{
		"missing htpasswd": {HTPasswdFile: filepath.Join(dir, "absent")},
		"cert without key": {TLSCertFile: filepath.Join(dir, "cert.pem")},
		"missing cert":     {TLSCertFile: filepath.Join(dir, "c.pem"), TLSKeyFile: filepath.Join(dir, "k.pem")},
		"relative root":    {RootDir: "relative/dir"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := registry.New(context.Background(), cfg); err == nil {
				t.Fatal("New accepted a bad configuration")
			} else if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New created the missing htpasswd file: %v", err)
	}
}

// pushArtifact pushes an artifact manifest referring to subject and returns
// its descriptor and the OCI-Subject response header.
func pushReferrer(t *testing.T, base, repo string, subject ocispec.Descriptor, artifactType string) (ocispec.Descriptor, string) {
	t.Helper()
	empty := ocispec.DescriptorEmptyJSON
	putBlob(t, base, repo, empty.Data)
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: artifactType,
		Config:       ocispec.Descriptor{MediaType: empty.MediaType, Digest: empty.Digest, Size: empty.Size},
		Layers:       []ocispec.Descriptor{{MediaType: empty.MediaType, Digest: empty.Digest, Size: empty.Size}},
		Subject:      &subject,
		Annotations:  map[string]string{"kind": artifactType},
	}
	b, _ := json.Marshal(m)
	desc := ocispec.Descriptor{MediaType: m.MediaType, ArtifactType: artifactType, Digest: digest.FromBytes(b), Size: int64(len(b)), Annotations: m.Annotations}
	resp := do(t, http.MethodPut, base+"/v2/"+repo+"/manifests/"+desc.Digest.String(), m.MediaType, b)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT referrer: %s", resp.Status)
	}
	return desc, resp.Header.Get("OCI-Subject")
}

func putBlob(t *testing.T, base, repo string, data []byte) {
	t.Helper()
	resp := do(t, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", "", nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST blob upload: %s", resp.Status)
	}
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	q := loc.Query()
	q.Set("digest", digest.FromBytes(data).String())
	loc.RawQuery = q.Encode()
	if resp := do(t, http.MethodPut, loc.String(), "application/octet-stream", data); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT blob: %s", resp.Status)
	}
}

func do(t *testing.T, method, url, contentType string, body []byte) *http.Response {
	t.Helper()
	resp, _ := call(t, method, url, contentType, body)
	return resp
}

func listReferrers(t *testing.T, base, repo string, subject digest.Digest, query string) (ocispec.Index, http.Header) {
	t.Helper()
	resp, err := http.Get(base + "/v2/" + repo + "/referrers/" + subject.String() + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET referrers: %s", resp.Status)
	}
	var idx ocispec.Index
	if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil {
		t.Fatal(err)
	}
	return idx, resp.Header
}

func TestReferrersPersistAcrossRestart(t *testing.T) {
	root := t.TempDir()
	start := func() (string, func()) { return startAt(t, root) }
	base, stop := start()
	// The subject need not exist (distribution spec: registries SHOULD
	// accept a manifest whose subject is absent).
	subject := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("subject"), Size: 7}
	sig, hdr := pushReferrer(t, base, "app", subject, "application/vnd.example.sig")
	if hdr != subject.Digest.String() {
		t.Fatalf("OCI-Subject = %q, want %s", hdr, subject.Digest)
	}
	sbom, _ := pushReferrer(t, base, "app", subject, "application/vnd.example.sbom")
	stop()

	base, stop = start()
	defer stop()
	idx, _ := listReferrers(t, base, "app", subject.Digest, "")
	if len(idx.Manifests) != 2 {
		t.Fatalf("after restart: %d referrers, want 2", len(idx.Manifests))
	}
	idx, h := listReferrers(t, base, "app", subject.Digest, "?artifactType=application/vnd.example.sbom")
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sbom.Digest || h.Get("OCI-Filters-Applied") != "artifactType" {
		t.Fatalf("filtered: %+v, OCI-Filters-Applied %q", idx.Manifests, h.Get("OCI-Filters-Applied"))
	}
	if got := idx.Manifests[0]; got.ArtifactType != sbom.ArtifactType || got.Size != sbom.Size || got.Annotations["kind"] != sbom.ArtifactType {
		t.Fatalf("descriptor %+v, want %+v", got, sbom)
	}
	if resp := do(t, http.MethodDelete, base+"/v2/app/manifests/"+sig.Digest.String(), "", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE: %s", resp.Status)
	}
	stop()
	base, stop = start()
	idx, _ = listReferrers(t, base, "app", subject.Digest, "")
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sbom.Digest {
		t.Fatalf("after delete and restart: %+v", idx.Manifests)
	}
	if _, err := oras.Resolve(context.Background(), mustRepo(t, base, "app"), sbom.Digest.String(), oras.DefaultResolveOptions); err != nil {
		t.Fatalf("resolve referrer: %v", err)
	}
}

// startAt starts a registry on the storage at root; stop shuts it down.
func startAt(t *testing.T, root string) (base string, stop func()) {
	t.Helper()
	return startOn(t, registry.Config{RootDir: root})
}

// startOn starts a registry from cfg; stop shuts it down.
func startOn(t *testing.T, cfg registry.Config) (base string, stop func()) {
	t.Helper()
	srv, err := registry.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	return ts.URL, func() { ts.Close(); _ = srv.Shutdown(context.Background()) }
}

func mustRepo(t *testing.T, base, name string) *remote.Repository {
	repo, err := remote.NewRepository(strings.TrimPrefix(base, "http://") + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	return repo
}

func TestServeShutdown(t *testing.T) {
	srv, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/: %s", resp.Status)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

func TestSHA512ManifestsSurviveRestart(t *testing.T) {
	root := t.TempDir()
	start := func() (string, func()) { return startAt(t, root) }
	base, stop := start()
	putBlob(t, base, "app", ocispec.DescriptorEmptyJSON.Data)
	m := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.example","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"` +
		ocispec.DescriptorEmptyJSON.Digest.String() + `","size":2},"layers":[]}`)
	d := digest.SHA512.FromBytes(m)
	if resp := do(t, http.MethodPut, base+"/v2/app/manifests/"+digest.SHA512.FromString("other").String(), ocispec.MediaTypeImageManifest, m); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("PUT with a wrong sha512 digest: %s, want 400", resp.Status)
	}
	resp := do(t, http.MethodPut, base+"/v2/app/manifests/"+d.String(), ocispec.MediaTypeImageManifest, m)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Docker-Content-Digest") != d.String() || !strings.HasSuffix(resp.Header.Get("Location"), d.String()) {
		t.Fatalf("PUT by sha512: %s, digest %q, location %q", resp.Status, resp.Header.Get("Docker-Content-Digest"), resp.Header.Get("Location"))
	}
	stop()
	base, stop = start()
	defer stop()
	req, _ := http.NewRequest(http.MethodHead, base+"/v2/app/manifests/"+d.String(), nil)
	req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != d.String() {
		t.Fatalf("HEAD by sha512 after restart: %s, digest %q", resp.Status, resp.Header.Get("Docker-Content-Digest"))
	}
	if resp := do(t, http.MethodDelete, base+"/v2/app/manifests/"+d.String(), "", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE by sha512: %s", resp.Status)
	}
	if resp := do(t, http.MethodGet, base+"/v2/app/manifests/"+d.String(), "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET by sha512 after delete: %s, want 404", resp.Status)
	}
}
