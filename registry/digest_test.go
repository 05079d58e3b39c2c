package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// uploadAs uploads data in two chunks (POST, PATCH, closing PUT) or in one
// PUT, naming it by d; it returns the closing response.
func uploadAs(t *testing.T, base, repo string, data []byte, d digest.Digest, chunked bool) *http.Response {
	t.Helper()
	resp := do(t, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", "", nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST upload: %s", resp.Status)
	}
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	last := data
	if chunked {
		half := len(data) / 2
		req, _ := http.NewRequest(http.MethodPatch, loc.String(), bytes.NewReader(data[:half]))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Content-Range", fmt.Sprintf("0-%d", half-1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("PATCH: %s", resp.Status)
		}
		if loc, err = resp.Location(); err != nil {
			t.Fatal(err)
		}
		last = data[half:]
	}
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	return do(t, http.MethodPut, loc.String(), "application/octet-stream", last)
}

// wantDigestHeaders checks a response names want in Docker-Content-Digest
// (and, when it has one, at the end of Location).
func wantDigestHeaders(t *testing.T, what string, resp *http.Response, status int, want digest.Digest) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: %s, want %d", what, resp.Status, status)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != want.String() {
		t.Fatalf("%s: Docker-Content-Digest %q, want %s", what, got, want)
	}
	if loc := resp.Header.Get("Location"); loc != "" && !strings.HasSuffix(loc, want.String()) {
		t.Fatalf("%s: Location %q, want it to end with %s", what, loc, want)
	}
}

// TestSHA512Content pushes blobs and manifests named by sha512 digests: each
// is answered, fetchable, mountable and referable by the digest the client
// named, on both storage drivers.
func TestSHA512Content(t *testing.T) {
	for name, cfg := range map[string]registry.Config{"inmemory": {}, "filesystem": {RootDir: t.TempDir()}} {
		t.Run(name, func(t *testing.T) {
			base := registrytest.NewServer(t, cfg).URL
			config := []byte(`{"architecture":"amd64","os":"linux"}`)
			layer := bytes.Repeat([]byte("sha512 layer "), 1000)
			configD, layerD := digest.SHA512.FromBytes(config), digest.SHA512.FromBytes(layer)

			wantDigestHeaders(t, "monolithic upload", uploadAs(t, base, "src", config, configD, false), http.StatusCreated, configD)
			wantDigestHeaders(t, "chunked upload", uploadAs(t, base, "src", layer, layerD, true), http.StatusCreated, layerD)
			for _, m := range []string{http.MethodHead, http.MethodGet} {
				resp, body := call(t, m, base+"/v2/src/blobs/"+layerD.String(), "", nil)
				wantDigestHeaders(t, m+" blob", resp, http.StatusOK, layerD)
				if m == http.MethodGet && !bytes.Equal(body, layer) {
					t.Fatalf("GET blob: %d bytes, want the %d pushed", len(body), len(layer))
				}
			}
			if resp := uploadAs(t, base, "src", []byte("other bytes"), layerD, false); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("upload with a wrong sha512 digest: %s, want 400", resp.Status)
			}

			// Mount both into another repository, then refer to them there.
			for _, d := range []digest.Digest{configD, layerD} {
				resp := do(t, http.MethodPost, base+"/v2/dst/blobs/uploads/?mount="+d.String()+"&from=src", "", nil)
				wantDigestHeaders(t, "mount", resp, http.StatusCreated, d)
				resp, _ = call(t, http.MethodHead, base+"/v2/dst/blobs/"+d.String(), "", nil)
				wantDigestHeaders(t, "HEAD mounted blob", resp, http.StatusOK, d)
			}
			if resp, _ := call(t, http.MethodPost, base+"/v2/dst/blobs/uploads/?mount="+digest.SHA512.FromString("absent").String()+"&from=src", "", nil); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("mount of an absent sha512 blob: %s, want 202 (an upload session)", resp.Status)
			}
			m, _ := json.Marshal(ocispec.Manifest{
				Versioned: specs.Versioned{SchemaVersion: 2},
				MediaType: ocispec.MediaTypeImageManifest,
				Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: configD, Size: int64(len(config))},
				Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: layerD, Size: int64(len(layer))}},
			})
			md := digest.SHA512.FromBytes(m)
			resp := do(t, http.MethodPut, base+"/v2/dst/manifests/"+md.String(), ocispec.MediaTypeImageManifest, m)
			wantDigestHeaders(t, "PUT manifest by sha512", resp, http.StatusCreated, md)
			resp, body := getManifest(t, base+"/v2/dst/manifests/"+md.String())
			wantDigestHeaders(t, "GET manifest by sha512", resp, http.StatusOK, md)
			if !bytes.Equal(body, m) {
				t.Fatalf("GET manifest by sha512: %s, want %s", body, m)
			}
			// By a tag, with ?digest= naming the sha512 digest.
			resp = do(t, http.MethodPut, base+"/v2/dst/manifests/v1?digest="+md.String(), ocispec.MediaTypeImageManifest, m)
			wantDigestHeaders(t, "PUT manifest by tag with a sha512 ?digest=", resp, http.StatusCreated, md)
			if resp := do(t, http.MethodPut, base+"/v2/dst/manifests/v2?digest="+digest.SHA512.FromString("other").String(), ocispec.MediaTypeImageManifest, m); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("PUT manifest by tag with a wrong ?digest=: %s, want 400", resp.Status)
			}

			// A referrer of the sha512 manifest is listed under its digest.
			ref, _ := pushReferrer(t, base, "dst", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: md, Size: int64(len(m))}, "application/vnd.example.sig")
			if idx, _ := listReferrers(t, base, "dst", md, ""); len(idx.Manifests) != 1 || idx.Manifests[0].Digest != ref.Digest {
				t.Fatalf("referrers of %s: %+v, want %s", md, idx.Manifests, ref.Digest)
			}
		})
	}
}

// TestSHA512CopyWithORAS copies a graph named by sha512 digests with oras-go
// (which checks Docker-Content-Digest against the digest it asked for) into
// the registry, between two of its repositories (mounting blobs) and back.
func TestSHA512CopyWithORAS(t *testing.T) {
	ctx := context.Background()
	base := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}).URL
	src := memory.New()
	push := func(mediaType string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.SHA512.FromBytes(b), Size: int64(len(b))}
		if err := src.Push(ctx, d, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	config := push(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"arm64","os":"linux"}`))
	layer := push(ocispec.MediaTypeImageLayer, bytes.Repeat([]byte("oras sha512 "), 500))
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: config, Layers: []ocispec.Descriptor{layer}})
	root := push(ocispec.MediaTypeImageManifest, m)

	one, two := mustRepo(t, base, "one"), mustRepo(t, base, "two")
	if err := oras.CopyGraph(ctx, src, one, root, oras.DefaultCopyGraphOptions); err != nil {
		t.Fatalf("copy into the registry: %v", err)
	}
	opts := oras.CopyGraphOptions{MountFrom: func(context.Context, ocispec.Descriptor) ([]string, error) { return []string{"one"}, nil }}
	if err := oras.CopyGraph(ctx, one, two, root, opts); err != nil {
		t.Fatalf("copy between repositories: %v", err)
	}
	back := memory.New()
	if err := oras.CopyGraph(ctx, two, back, root, oras.DefaultCopyGraphOptions); err != nil {
		t.Fatalf("copy back: %v", err)
	}
	for _, d := range []ocispec.Descriptor{config, layer, root} {
		if ok, err := back.Exists(ctx, d); err != nil || !ok {
			t.Fatalf("%s not copied back: %v", d.Digest, err)
		}
	}
}

// TestNonDistributableLayers pushes manifests whose layers carry urls and
// whose blobs are never pushed, as Windows base images and other
// non-distributable content are: each is stored and served.
func TestNonDistributableLayers(t *testing.T) {
	base := registrytest.NewServer(t, registry.Config{}).URL
	putBlob(t, base, "win", ocispec.DescriptorEmptyJSON.Data)
	empty := ocispec.DescriptorEmptyJSON
	foreign := digest.FromString("never pushed")
	for _, tc := range []struct {
		name, mediaType, configType, layerType string
	}{
		{"OCI non-distributable gzip", ocispec.MediaTypeImageManifest, empty.MediaType, "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"},
		{"OCI non-distributable tar", ocispec.MediaTypeImageManifest, empty.MediaType, "application/vnd.oci.image.layer.nondistributable.v1.tar"},
		{"Docker foreign layer", "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.container.image.v1+json", "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := []byte(`{"schemaVersion":2,"mediaType":"` + tc.mediaType + `","config":{"mediaType":"` + tc.configType + `","digest":"` + empty.Digest.String() + `","size":2},` +
				`"layers":[{"mediaType":"` + tc.layerType + `","digest":"` + foreign.String() + `","size":12345,"urls":["https://mcr.microsoft.com/v2/windows/blobs/` + foreign.String() + `"]}]}`)
			d := digest.FromBytes(m)
			resp, body := call(t, http.MethodPut, base+"/v2/win/manifests/"+d.String(), tc.mediaType, m)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("PUT: %s %s", resp.Status, body)
			}
			resp, body = getManifest(t, base+"/v2/win/manifests/"+d.String())
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, m) {
				t.Fatalf("GET: %s %s", resp.Status, body)
			}
		})
	}
}

// getManifest GETs a manifest accepting every manifest media type.
func getManifest(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", strings.Join([]string{ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex,
		"application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.distribution.manifest.list.v2+json"}, ", "))
	return send(t, req)
}
