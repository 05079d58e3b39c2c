package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
)

// SBOMs: at create, one software bill of materials per image platform
// manifest kept, stored as an OCI 1.1 referrer of that manifest (subject)
// and listed in the package root, so that the package's signature covers it
// and `oras discover` finds it in any registry the package goes to.

// sbomFormatOf is the format whose documents have artifactType t.
func sbomFormatOf(t string) (definition.SBOMFormat, bool) {
	switch t {
	case definition.ArtifactTypeSPDX:
		return definition.SBOMFormatSPDX, true
	case definition.ArtifactTypeCycloneDX:
		return definition.SBOMFormatCycloneDX, true
	case definition.ArtifactTypeSyft:
		return definition.SBOMFormatSyft, true
	}
	return "", false
}

// ErrSBOMNotCarried means a package holds no SBOM of an image (it was
// created without them).
var ErrSBOMNotCarried = errors.New("no SBOM in the package")

// SBOM is an SBOM recorded in ferry.json: a referrer manifest (Digest) of
// one platform manifest (Subject) of the image.
type SBOM struct {
	Platform     string        `json:"platform"`
	Subject      digest.Digest `json:"subject"`
	Digest       digest.Digest `json:"digest"`
	ArtifactType string        `json:"artifactType"`
	// Size is the referrer manifest's size plus its config's and document's.
	Size int64 `json:"size"`
}

// checkSBOMs checks the SBOM entries of a package root against the graph:
// each a referrer manifest whose artifactType is an SBOM format, with one
// layer of that media type, and whose subject is a manifest of the graph of
// an image entry of the same component and reference. node returns the
// verified bytes of a manifest or index of the graph.
func checkSBOMs(root *ocispec.Index, node func(digest.Digest) ([]byte, bool)) error {
	graphs := map[string]map[digest.Digest]bool{} // component|ref → manifests
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] != KindImage {
			continue
		}
		key := m.Annotations[AnnotationComponent] + "|" + m.Annotations[AnnotationImageRef]
		g := graphs[key]
		if g == nil {
			g = map[digest.Digest]bool{}
			graphs[key] = g
		}
		g[m.Digest] = true
		if data, ok := node(m.Digest); ok && graph.IsIndex(m.MediaType) {
			kids, _ := graph.Children(m.MediaType, data)
			for _, k := range kids {
				g[k.Digest] = true
			}
		}
	}
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] != KindSBOM {
			continue
		}
		ref := m.Annotations[AnnotationImageRef]
		data, ok := node(m.Digest)
		if !ok || m.MediaType != ocispec.MediaTypeImageManifest {
			return fmt.Errorf("%w: SBOM %s of %s is not an image manifest", ErrCorrupt, m.Digest, ref)
		}
		var sm ocispec.Manifest
		if err := json.Unmarshal(data, &sm); err != nil {
			return fmt.Errorf("%w: SBOM %s of %s: %w", ErrCorrupt, m.Digest, ref, err)
		}
		if _, ok := sbomFormatOf(sm.ArtifactType); !ok || len(sm.Layers) != 1 || sm.Layers[0].MediaType != sm.ArtifactType || m.ArtifactType != sm.ArtifactType {
			return fmt.Errorf("%w: SBOM %s of %s: artifactType %.64q is not an SBOM format with one layer of that media type", ErrCorrupt, m.Digest, ref, sm.ArtifactType)
		}
		if sm.Subject == nil || !graphs[m.Annotations[AnnotationComponent]+"|"+ref][sm.Subject.Digest] {
			return fmt.Errorf("%w: SBOM %s: its subject is not a manifest of image %s", ErrCorrupt, m.Digest, ref)
		}
	}
	return nil
}

// checkConfigSBOMs checks that every SBOM ferry.json records is an SBOM
// entry of the root with the subject and artifactType it records.
func checkConfigSBOMs(cfg *Config, root *ocispec.Index, node func(digest.Digest) ([]byte, bool)) []string {
	type entry struct {
		subject      digest.Digest
		artifactType string
	}
	entries := map[string]entry{}
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] != KindSBOM {
			continue
		}
		var sm ocispec.Manifest
		data, _ := node(m.Digest)
		if json.Unmarshal(data, &sm) != nil || sm.Subject == nil {
			continue
		}
		entries[m.Annotations[AnnotationComponent]+"|"+m.Annotations[AnnotationImageRef]+"|"+m.Digest.String()] = entry{sm.Subject.Digest, sm.ArtifactType}
	}
	var missing []string
	for _, c := range cfg.Components {
		for _, i := range c.Images {
			for _, s := range i.SBOMs {
				e, ok := entries[c.Name+"|"+i.Ref+"|"+s.Digest.String()]
				if !ok || e.subject != s.Subject || e.artifactType != s.ArtifactType {
					missing = append(missing, fmt.Sprintf("SBOM %s of %s (%s)", s.Digest, i.Ref, s.Platform))
				}
			}
		}
	}
	return missing
}

// MaxSBOMSize bounds an SBOM document: what the helper may write, and what
// ReadSBOMs reads into memory (64 MiB; the SBOM of a large image with
// thousands of packages is 5-20 MiB).
const MaxSBOMSize = 64 << 20

// SBOMDocument is an SBOM read from a package: the record ferry.json
// keeps of it, the image it describes, and the document.
type SBOMDocument struct {
	SBOM
	// Image is the original reference of the image, as ferry.json records it.
	Image string `json:"image"`
	Data  []byte `json:"-"`
}

// ReadSBOMs returns the SBOM documents of the package ref names in src,
// of the image named image (its reference as ferry.json records it, or as
// a user spells it: nginx:1.27 is docker.io/library/nginx:1.27) on
// platform (os/arch[/variant]; "" for every platform). Only SBOMs of the
// package's graph are read, never other referrers a registry may hold;
// each document is checked against its digest. A package on disk (*Reader,
// ref "" or its root) is verified whole first, as Inspect does.
func ReadSBOMs(ctx context.Context, src oras.ReadOnlyTarget, ref, image, platform string) ([]SBOMDocument, error) {
	g, err := readGraph(ctx, src, ref, nil)
	if err != nil {
		return nil, err
	}
	cfg, node := g.config, g.node
	img, err := findImage(cfg, image)
	if err != nil {
		return nil, err
	}
	var docs []SBOMDocument
	var platforms []string
	for _, s := range img.SBOMs {
		platforms = append(platforms, s.Platform)
		if platform != "" && s.Platform != platform {
			continue
		}
		data, ok := node(s.Digest)
		var m ocispec.Manifest
		if !ok || json.Unmarshal(data, &m) != nil || len(m.Layers) != 1 {
			return nil, fmt.Errorf("%w: SBOM %s of %s is not in the package graph", ErrCorrupt, s.Digest, img.Ref)
		}
		layer := m.Layers[0]
		if err := graph.CheckDescriptor(layer); err != nil {
			return nil, fmt.Errorf("%w: SBOM %s: %w", ErrCorrupt, s.Digest, err)
		}
		if layer.Size > MaxSBOMSize {
			return nil, fmt.Errorf("SBOM %s of %s: %d bytes is more than %d", s.Digest, img.Ref, layer.Size, MaxSBOMSize)
		}
		doc, err := content.FetchAll(ctx, src, layer)
		if err != nil {
			return nil, &BlobError{Op: "fetch", Digest: layer.Digest, Err: err}
		}
		docs = append(docs, SBOMDocument{SBOM: s, Image: img.Ref, Data: doc})
	}
	switch {
	case len(img.SBOMs) == 0:
		return nil, fmt.Errorf("image %s: %w", img.Ref, ErrSBOMNotCarried)
	case len(docs) == 0:
		return nil, fmt.Errorf("image %s has no SBOM for %s; it has %s", img.Ref, platform, strings.Join(platforms, ", "))
	}
	return docs, nil
}

// findImage finds the image named name in cfg.
func findImage(cfg *Config, name string) (*Image, error) {
	want := name
	if n, err := reference.ParseNormalizedNamed(name); err == nil {
		want = n.String()
	}
	var refs []string
	for ci := range cfg.Components {
		for ii := range cfg.Components[ci].Images {
			img := &cfg.Components[ci].Images[ii]
			if img.Ref == name || img.Ref == want {
				return img, nil
			}
			refs = append(refs, img.Ref)
		}
	}
	return nil, fmt.Errorf("the package has no image %s; it has %s", name, strings.Join(refs, ", "))
}
