package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/registry"
)

// TestGarbageCollectKeepsSHA512Content: an image pushed by sha512 digests
// (its config and layer uploaded by them, its manifest and an index over
// it put by them) and tagged survives a garbage collection whole: every
// blob it references by a sha512 digest is stored under its sha256 digest,
// which distribution's mark and sweep did not count as referenced; and an
// unreferenced one is swept without failing the collection.
func TestGarbageCollectKeepsSHA512Content(t *testing.T) {
	forEachStorage(t, func(t *testing.T, cfg registry.Config) {
		cfg.MaintenancePoll = 50 * time.Millisecond
		base, stop := startOn(t, cfg)
		defer stop()
		config := []byte(`{"architecture":"amd64","os":"linux"}`)
		layer := bytes.Repeat([]byte("sha512 gc layer "), 4000)
		configD, layerD := digest.SHA512.FromBytes(config), digest.SHA512.FromBytes(layer)
		for _, b := range []struct {
			data []byte
			d    digest.Digest
		}{{config, configD}, {layer, layerD}} {
			if resp := uploadAs(t, base, "app", b.data, b.d, false); resp.StatusCode != http.StatusCreated {
				t.Fatalf("upload %s: %s", b.d, resp.Status)
			}
		}
		m, _ := json.Marshal(ocispec.Manifest{
			Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
			Config: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: configD, Size: int64(len(config))},
			Layers: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: layerD, Size: int64(len(layer))}},
		})
		md := digest.SHA512.FromBytes(m)
		if resp, body := call(t, http.MethodPut, base+"/v2/app/manifests/"+md.String(), ocispec.MediaTypeImageManifest, m); resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT manifest: %s %s", resp.Status, body)
		}
		idx, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
			Manifests: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageManifest, Digest: md, Size: int64(len(m))}}})
		if resp, body := call(t, http.MethodPut, base+"/v2/app/manifests/v1?digest="+digest.SHA512.FromBytes(idx).String(), ocispec.MediaTypeImageIndex, idx); resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT index: %s %s", resp.Status, body)
		}

		// A blob uploaded by a sha512 digest that nothing references:
		// linked under both digests, it is swept once (the sweep removed
		// its sha256 link twice, and failed).
		loose := []byte("a loose sha512 blob")
		looseD := digest.SHA512.FromBytes(loose)
		if resp := uploadAs(t, base, "app", loose, looseD, false); resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload loose blob: %s", resp.Status)
		}

		for range 2 {
			if _, err := registry.GarbageCollect(context.Background(), cfg, registry.GCOptions{Settle: 200 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		}
		if resp, _ := call(t, http.MethodHead, base+"/v2/app/blobs/"+looseD.String(), "", nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("HEAD loose sha512 blob after gc: %s, want 404", resp.Status)
		}
		for _, d := range []digest.Digest{configD, layerD} {
			resp, body := call(t, http.MethodGet, base+"/v2/app/blobs/"+d.String(), "", nil)
			if resp.StatusCode != http.StatusOK || digest.SHA512.FromBytes(body) != d {
				t.Fatalf("GET blob %s after gc: %s", d, resp.Status)
			}
		}
		for _, ref := range []string{"v1", md.String()} {
			if resp, _ := getManifest(t, base+"/v2/app/manifests/"+ref); resp.StatusCode != http.StatusOK {
				t.Fatalf("GET manifest %s after gc: %s", ref, resp.Status)
			}
		}
	})
}
