package registry_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestMountWithoutFrom: a mount request without from (or with an empty
// one) is no mount, and gets an upload session, 202 with a Location (OCI
// distribution-spec v1.1, "Mounting a blob from another repository"); the
// upstream suite checks it for sha256 and sha512 digests.
func TestMountWithoutFrom(t *testing.T) {
	base := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}).URL
	data := []byte("a blob to mount")
	putBlob(t, base, "src", data)
	for _, d := range []digest.Digest{digest.SHA256.FromBytes(data), digest.SHA512.FromBytes(data)} {
		for _, q := range []string{"?mount=" + d.String(), "?mount=" + d.String() + "&from="} {
			resp, body := call(t, http.MethodPost, base+"/v2/dst/blobs/uploads/"+q, "", nil)
			if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") == "" {
				t.Errorf("POST %s: %s %s, want 202 with a Location", q, resp.Status, body)
			}
		}
	}
}

// TestSHA512IndexChildren pushes an image index whose children are named
// by sha512 digests (as the upstream suite's sha512 data does): the index is
// accepted and served by its sha512 digest; a child deleted by its sha512
// digest, or by the sha256 digest it is stored under, is gone by both, also
// after HEAD requests that let distribution cache it.
func TestSHA512IndexChildren(t *testing.T) {
	forEachStorage(t, func(t *testing.T, cfg registry.Config) {
		base := registrytest.NewServer(t, cfg).URL
		putBlob(t, base, "app", ocispec.DescriptorEmptyJSON.Data)
		var children []ocispec.Descriptor
		for _, arch := range []string{"amd64", "arm64"} {
			m, _ := json.Marshal(ocispec.Manifest{
				Versioned:    specs.Versioned{SchemaVersion: 2},
				MediaType:    ocispec.MediaTypeImageManifest,
				ArtifactType: "application/vnd.example." + arch,
				Config:       ocispec.DescriptorEmptyJSON,
				Layers:       []ocispec.Descriptor{},
			})
			d := digest.SHA512.FromBytes(m)
			if resp, body := call(t, http.MethodPut, base+"/v2/app/manifests/"+d.String(), ocispec.MediaTypeImageManifest, m); resp.StatusCode != http.StatusCreated {
				t.Fatalf("PUT child by sha512: %s %s", resp.Status, body)
			}
			children = append(children, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d, Size: int64(len(m)),
				Platform: &ocispec.Platform{OS: "linux", Architecture: arch}})
		}
		idx, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: children})
		id := digest.SHA512.FromBytes(idx)
		resp, body := call(t, http.MethodPut, base+"/v2/app/manifests/"+id.String(), ocispec.MediaTypeImageIndex, idx)
		wantDigestHeaders(t, "PUT index of sha512 children: "+string(body), resp, http.StatusCreated, id)
		resp, body = getManifest(t, base+"/v2/app/manifests/"+id.String())
		wantDigestHeaders(t, "GET index by sha512", resp, http.StatusOK, id)
		if string(body) != string(idx) {
			t.Fatalf("GET index: %s, want %s", body, idx)
		}

		head := func(ref string) int {
			req, _ := http.NewRequest(http.MethodHead, base+"/v2/app/manifests/"+ref, nil)
			req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
			resp, _ := send(t, req)
			return resp.StatusCode
		}
		// Deleted by its sha512 digest, after HEADs by it.
		first := children[0].Digest
		for range 2 {
			if code := head(first.String()); code != http.StatusOK {
				t.Fatalf("HEAD child: %d", code)
			}
		}
		if resp, body := call(t, http.MethodDelete, base+"/v2/app/manifests/"+first.String(), "", nil); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("DELETE child by sha512: %s %s", resp.Status, body)
		}
		if code := head(first.String()); code != http.StatusNotFound {
			t.Fatalf("HEAD child deleted by sha512: %d, want 404", code)
		}
		// Deleted by the sha256 digest it is stored under.
		second := children[1].Digest
		resp, raw := getManifest(t, base+"/v2/app/manifests/"+second.String())
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET second child: %s", resp.Status)
		}
		canonical := digest.SHA256.FromBytes(raw)
		if code := head(second.String()); code != http.StatusOK {
			t.Fatalf("HEAD second child: %d", code)
		}
		if resp, body := call(t, http.MethodDelete, base+"/v2/app/manifests/"+canonical.String(), "", nil); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("DELETE child by sha256: %s %s", resp.Status, body)
		}
		for _, ref := range []digest.Digest{canonical, second} {
			if code := head(ref.String()); code != http.StatusNotFound {
				t.Fatalf("HEAD %s after DELETE by sha256: %d, want 404", ref, code)
			}
		}
	})
}
