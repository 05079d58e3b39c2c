package zarf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
)

// SBOMDir is the folder of an extracted package that Extract extracts
// sboms.tar into.
const SBOMDir = "sboms"

// ImageSBOM is the Syft JSON document Zarf made of an image of a built
// package (zarf package create, unless --skip-sbom).
type ImageSBOM struct {
	// Ref is the image's normalized reference (as ferry's definition and
	// Zarf's SBOM both name it: docker.io/library/nginx:1.27).
	Ref string `json:"ref"`
	// Manifest is the image manifest the document describes: the entry of
	// the package's OCI layout (images/) that Zarf read for Ref.
	Manifest digest.Digest `json:"manifest"`
	// Path is the document, extracted from sboms.tar; it holds at most
	// artifact.MaxSBOMSize bytes.
	Path string `json:"path"`
}

// sbomName is the name Zarf v0.60.0 gives the SBOM of image ref in
// sboms.tar (src/pkg/packager/layout/sbom.go: its reference, every
// character but letters, digits, '.' and '-' made '_', then .json).
// ref is normalized as Zarf's transform.ParseImageRef normalizes it,
// which is artifact.NormalizeImageRef.
func sbomName(ref string) string {
	return unsafeName.ReplaceAllString(ref+".json", "_")
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9.\-]`)

// componentSBOMPrefix starts the names of the SBOMs Zarf makes of a
// component's files and data injections.
const componentSBOMPrefix = "zarf-component-"

// sboms finds the Syft documents of images, the normalized references of
// the package's images, in the extracted sboms.tar, each with the layout
// manifest it describes; what sboms.tar holds that ferry does not carry
// (the HTML viewers, the SBOMs of components' files) is reported as gaps.
// A document larger than artifact.MaxSBOMSize is an error.
func (c *converter) sboms(images []string) ([]ImageSBOM, error) {
	dir := filepath.Join(c.zdir, SBOMDir)
	entries, err := fs.ReadDir(c.fsys(), SBOMDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := map[string]fs.DirEntry{}
	for _, e := range entries {
		names[e.Name()] = e
	}
	manifests, err := c.layoutManifests()
	if err != nil {
		return nil, err
	}
	var out []ImageSBOM
	seen := map[string]bool{}
	for _, ref := range images {
		name := sbomName(ref)
		e, ok := names[name]
		if !ok || seen[ref] {
			continue
		}
		seen[ref] = true
		delete(names, name)
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s:%s: not a regular file", SBOMTar, name)
		}
		if fi.Size() > artifact.MaxSBOMSize {
			return nil, fmt.Errorf("%w: %s:%s: the SBOM of %s is %d bytes, more than %d", artifact.ErrCorrupt, SBOMTar, name, ref, fi.Size(), artifact.MaxSBOMSize)
		}
		m, ok := manifests[ref]
		if !ok {
			c.sbomGap(name, "the SBOM of "+ref+", whose manifest images/index.json does not name", "not carried: ferry adds an SBOM as a referrer of the manifest it describes")
			continue
		}
		out = append(out, ImageSBOM{Ref: ref, Manifest: m, Path: filepath.Join(dir, name)})
	}
	var viewers, rest []string
	for name := range names {
		switch {
		case strings.HasSuffix(name, ".html"):
			viewers = append(viewers, name)
		case strings.HasPrefix(name, componentSBOMPrefix) && strings.HasSuffix(name, ".json"):
			comp := strings.TrimSuffix(strings.TrimPrefix(name, componentSBOMPrefix), ".json")
			c.sbomGap(name, "the SBOM Zarf made of component "+comp+"'s files and data injections", "not carried: ferry's SBOMs describe images; ferry.json records each file's sha256")
		default:
			rest = append(rest, name)
		}
	}
	sort.Strings(viewers)
	sort.Strings(rest)
	if len(viewers) > 0 {
		c.sbomGap("", "Zarf's HTML SBOM viewers ("+firstOf(viewers)+")", "not carried: the Syft documents they show are carried as referrers; `ferry package sbom` writes them out")
	}
	for _, name := range rest {
		c.sbomGap(name, "a document that names no image of the package", "not carried")
	}
	return out, nil
}

// sbomGap reports what sboms.tar holds (entry name, if any) that is not
// carried.
func (c *converter) sbomGap(name, what, nearest string) {
	c.gaps = append(c.gaps, Gap{File: filepath.Join(c.zdir, SBOMTar), Field: clip(name), What: clipLine(what), Nearest: nearest})
}

// layoutManifests maps the normalized references of the package's OCI
// layout (images/index.json) to their manifests, as Zarf's LoadOCIImage
// finds them: by the base-name annotation, else the ref.name one.
func (c *converter) layoutManifests() (map[string]digest.Digest, error) {
	data, err := c.readFile("images/index.json", artifact.MaxManifestSize)
	if errors.Is(err, confine.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", artifact.ErrCorrupt, err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%w: images/index.json: %w", artifact.ErrCorrupt, err)
	}
	out := map[string]digest.Digest{}
	for _, key := range []string{ocispec.AnnotationRefName, ocispec.AnnotationBaseImageName} {
		for _, m := range idx.Manifests {
			if ref, err := definition.NormalizeImageRef(m.Annotations[key]); err == nil {
				out[ref] = m.Digest
			}
		}
	}
	return out, nil
}

// SBOMs serves the Syft documents of a built Zarf package (Import's
// Result.SBOMs) to artifact.Create, which adds each as a referrer of the
// manifest it describes, listed in the root and ferry.json as create's own
// SBOMs are. A manifest Zarf made no document of is given to Next (ferry's
// generator, import --sbom), in the format create asks; with no Next it
// gets no SBOM. So Zarf's document wins where there is one.
type SBOMs struct {
	Images []ImageSBOM
	Next   build.SBOMGenerator
}

var _ build.SBOMFormatGenerator = SBOMs{}

// GenerateSBOM implements artifact.SBOMGenerator.
func (s SBOMs) GenerateSBOM(ctx context.Context, src content.Fetcher, req build.SBOMRequest) ([]byte, error) {
	doc, _, err := s.GenerateSBOMFormat(ctx, src, req)
	return doc, err
}

// GenerateSBOMFormat implements artifact.SBOMFormatGenerator: Zarf's
// document of req.Manifest as req.Ref, read again bounded and checked to
// be one JSON object with Syft's "schema", in SBOMFormatSyft.
func (s SBOMs) GenerateSBOMFormat(ctx context.Context, src content.Fetcher, req build.SBOMRequest) ([]byte, definition.SBOMFormat, error) {
	ref, _ := definition.NormalizeImageRef(req.Ref)
	for _, i := range s.Images {
		if i.Ref != ref || i.Manifest != req.Manifest.Digest {
			continue
		}
		doc, err := readFileBounded(i.Path, artifact.MaxSBOMSize)
		if err != nil {
			return nil, "", fmt.Errorf("Zarf's SBOM: %w", err)
		}
		var head struct {
			Schema *struct {
				Version string `json:"version"`
			} `json:"schema"`
		}
		if err := json.Unmarshal(doc, &head); err != nil || head.Schema == nil {
			return nil, "", fmt.Errorf("%w: Zarf's SBOM %s is not a Syft JSON document", artifact.ErrCorrupt, filepath.Base(i.Path))
		}
		return doc, definition.SBOMFormatSyft, nil
	}
	switch g := s.Next.(type) {
	case nil:
		return nil, "", build.ErrNoSBOM
	case build.SBOMFormatGenerator:
		return g.GenerateSBOMFormat(ctx, src, req)
	default:
		doc, err := g.GenerateSBOM(ctx, src, req)
		format := req.Format
		if format == "" {
			format = definition.SBOMFormatSPDX
		}
		return doc, format, err
	}
}
