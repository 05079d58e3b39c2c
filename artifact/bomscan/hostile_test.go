package bomscan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// hostileRegistry is a registry on loopback whose catalog, tag lists and
// content a test makes up: repos names each repository's tags; each tag
// resolves to tagged[tag], else to an image manifest; blobs holds the
// content served by digest. It counts the requests it answers by kind.
type hostileRegistry struct {
	repos   map[string][]string
	tagged  map[string]ocispec.Descriptor
	blobs   map[digest.Digest][]byte
	resolve atomic.Int64 // manifests asked for by tag
	configs atomic.Int64 // ferry.json documents fetched
	cfgSet  map[digest.Digest]bool
}

func (h *hostileRegistry) put(mediaType string, data []byte) ocispec.Descriptor {
	d := digest.FromBytes(data)
	h.blobs[d] = data
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

func (h *hostileRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/v2/")
	switch {
	case r.URL.Path == "/v2/":
		return
	case p == "_catalog":
		var names []string
		for n := range h.repos {
			names = append(names, n)
		}
		_ = json.NewEncoder(w).Encode(map[string][]string{"repositories": names})
		return
	case strings.HasSuffix(p, "/tags/list"):
		name := strings.TrimSuffix(p, "/tags/list")
		_ = json.NewEncoder(w).Encode(map[string]any{"name": name, "tags": h.repos[name]})
		return
	}
	i := strings.LastIndex(p, "/manifests/")
	kind := "/manifests/"
	if i < 0 {
		i, kind = strings.LastIndex(p, "/blobs/"), "/blobs/"
	}
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	ref := p[i+len(kind):]
	var desc ocispec.Descriptor
	if d, err := digest.Parse(ref); err == nil {
		data, ok := h.blobs[d]
		if !ok {
			http.NotFound(w, r)
			return
		}
		desc = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: d, Size: int64(len(data))}
		var probe struct{ MediaType string }
		if json.Unmarshal(data, &probe) == nil && probe.MediaType != "" {
			desc.MediaType = probe.MediaType
		}
		if h.cfgSet[d] {
			h.configs.Add(1)
		}
	} else {
		if strings.HasPrefix(ref, "sha256-") {
			http.NotFound(w, r) // no signature, no referrers tag
			return
		}
		h.resolve.Add(1)
		var ok bool
		if desc, ok = h.tagged[ref]; !ok {
			desc = h.put(ocispec.MediaTypeImageManifest, []byte(`{"schemaVersion":2,"mediaType":"`+ocispec.MediaTypeImageManifest+`"}`))
		}
	}
	w.Header().Set("Content-Type", desc.MediaType)
	w.Header().Set("Docker-Content-Digest", desc.Digest.String())
	w.Header().Set("Content-Length", fmt.Sprint(desc.Size))
	if r.Method == http.MethodGet {
		_, _ = w.Write(h.blobs[desc.Digest])
	}
}

func newHostileRegistry(t *testing.T) (*hostileRegistry, *remote.Registry) {
	t.Helper()
	h := &hostileRegistry{repos: map[string][]string{}, tagged: map[string]ocispec.Descriptor{}, blobs: map[digest.Digest][]byte{}, cfgSet: map[digest.Digest]bool{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	reg, err := remote.NewRegistry(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	reg.PlainHTTP = true
	return h, reg
}

// fakePackage puts a package root (name) of one image whose ferry.json
// records n SBOMs, each a referrer manifest the root lists, and returns
// the root's descriptor.
func (h *hostileRegistry) fakePackage(t *testing.T, name string, n int) ocispec.Descriptor {
	t.Helper()
	const ref = "example.com/a:1"
	imgData, _ := json.Marshal(ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: ocispec.DescriptorEmptyJSON, Layers: []ocispec.Descriptor{}, Annotations: map[string]string{"n": name}})
	imgDesc := h.put(ocispec.MediaTypeImageManifest, imgData)
	img := artifact.Image{Ref: ref, Digest: imgDesc.Digest, OriginalDigest: imgDesc.Digest, Size: imgDesc.Size, MediaType: ocispec.MediaTypeImageManifest, Platforms: []string{"linux/amd64"}}
	entry := imgDesc
	entry.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindImage, artifact.AnnotationComponent: "c", artifact.AnnotationImageRef: ref}
	manifests := []ocispec.Descriptor{entry}
	for i := range n {
		doc := h.put(definition.ArtifactTypeSPDX, []byte(fmt.Sprint(name, i)))
		sm, _ := json.Marshal(ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: definition.ArtifactTypeSPDX,
			Config: ocispec.DescriptorEmptyJSON, Layers: []ocispec.Descriptor{doc}, Subject: &imgDesc})
		d := h.put(ocispec.MediaTypeImageManifest, sm)
		img.SBOMs = append(img.SBOMs, artifact.SBOM{Platform: "linux/amd64", Subject: imgDesc.Digest, Digest: d.Digest, ArtifactType: definition.ArtifactTypeSPDX, Size: d.Size})
		d.ArtifactType = definition.ArtifactTypeSPDX
		d.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindSBOM, artifact.AnnotationComponent: "c", artifact.AnnotationImageRef: ref}
		manifests = append(manifests, d)
	}
	cfgData, err := json.Marshal(artifact.Config{SchemaVersion: 1, Name: name, Version: "1.0.0", Platforms: []string{"linux/amd64"}, Components: []artifact.Component{{Name: "c", Images: []artifact.Image{img}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.put(artifact.MediaTypeConfig, cfgData)
	h.cfgSet[cfg.Digest] = true
	pm, _ := json.Marshal(ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{}})
	pmDesc := h.put(ocispec.MediaTypeImageManifest, pm)
	pmDesc.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindPackage}
	root, _ := json.Marshal(ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, ArtifactType: artifact.ArtifactTypePackage, Manifests: append([]ocispec.Descriptor{pmDesc}, manifests...)})
	return h.put(ocispec.MediaTypeImageIndex, root)
}

// TestRegistrySourceBounds: a registry given to --registry that lists
// more tags than a scan resolves, or packages whose ferry.json files claim
// more SBOMs than a scan reads, is refused in one line as soon as the
// count is known, not after resolving every tag or holding every claim.
func TestRegistrySourceBounds(t *testing.T) {
	ctx := context.Background()
	t.Run("tags", func(t *testing.T) {
		h, reg := newHostileRegistry(t)
		for r := range 3 {
			tags := make([]string, 40_000)
			for i := range tags {
				tags[i] = fmt.Sprint("t", i)
			}
			h.repos[fmt.Sprint("repo", r)] = tags
		}
		start := time.Now()
		_, err := bomscan.RegistrySource(reg, "").SBOMs(ctx)
		t.Logf("%v after %d tags resolved in %v", err, h.resolve.Load(), time.Since(start))
		if err == nil || !strings.Contains(err.Error(), "tags") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("120,000 tags: %v", err)
		}
		if n := h.resolve.Load(); n > 0 {
			t.Errorf("%d tags resolved before the refusal, want none", n)
		}
	})
	t.Run("sboms", func(t *testing.T) {
		h, reg := newHostileRegistry(t)
		const packages, each = 30, 5_000
		for i := range packages {
			name := fmt.Sprint("p", i)
			h.tagged[name] = h.fakePackage(t, name, each)
			h.repos[name] = []string{name}
		}
		start := time.Now()
		_, err := bomscan.RegistrySource(reg, "").SBOMs(ctx)
		t.Logf("%v after %d ferry.json read in %v", err, h.configs.Load(), time.Since(start))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprint(bomscan.MaxSBOMs)) {
			t.Fatalf("%d SBOMs claimed: %v", packages*each, err)
		}
		if n := h.configs.Load(); n > bomscan.MaxSBOMs/each+1 {
			t.Errorf("%d ferry.json read, want at most %d: the claims past the bound are held", n, bomscan.MaxSBOMs/each+1)
		}
	})
}
