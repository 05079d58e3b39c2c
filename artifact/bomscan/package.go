package bomscan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
)

// PackageSource is the SBOMs of the package ref names in src: a package
// on disk (*artifact.Reader, ref "" for its root), whose blobs are all
// verified first as `package sbom` verifies them, or a registry
// repository, whose package's manifests and ferry.json are read, each
// checked against its digest. Only SBOMs of the package's graph are read,
// never other referrers a registry holds.
func PackageSource(src oras.ReadOnlyTarget, ref string) Source {
	return &packageSource{src: src, ref: ref}
}

type packageSource struct {
	src oras.ReadOnlyTarget
	ref string
}

func (p *packageSource) SBOMs(ctx context.Context) ([]SBOMRef, error) {
	return PackageSBOMs(ctx, p.src, p.ref, nil)
}

// RunsFunc says where an image's platform runs, for its SBOM's Location.
type RunsFunc func(img artifact.Image, s artifact.SBOM) []string

// PackageSBOMs lists the SBOMs of the package ref names in src, as
// PackageSource does, each Location's Runs given by runs (nil: none).
func PackageSBOMs(ctx context.Context, src oras.ReadOnlyTarget, ref string, runs RunsFunc) ([]SBOMRef, error) {
	if r, ok := src.(*artifact.Reader); ok && isRoot(ctx, r, ref) {
		sum, err := r.Walk(ctx, nil, nil)
		if err != nil {
			return nil, err
		}
		node := func(_ context.Context, d digest.Digest) ([]byte, error) {
			if n, ok := sum.Nodes[d]; ok {
				return n.Data, nil
			}
			return nil, fmt.Errorf("%w: SBOM %s is not in the package graph", artifact.ErrCorrupt, d)
		}
		return refsOf(r.Config(), r, node, runs), nil
	}
	cfg, _, err := artifact.ReadConfig(ctx, src, ref)
	if err != nil {
		return nil, err
	}
	return refsOf(cfg, src, manifestFetcher(src), runs), nil
}

// isRoot reports whether ref names r's root ("" does).
func isRoot(ctx context.Context, r *artifact.Reader, ref string) bool {
	if ref == "" || ref == r.Root().Digest.String() {
		return true
	}
	d, err := r.Resolve(ctx, ref)
	return err == nil && d.Digest == r.Root().Digest
}

// nodeFunc returns the verified bytes of a manifest of a package's graph.
type nodeFunc func(ctx context.Context, d digest.Digest) ([]byte, error)

// manifestFetcher fetches manifests of src by digest, each checked.
func manifestFetcher(src oras.ReadOnlyTarget) nodeFunc {
	return func(ctx context.Context, d digest.Digest) ([]byte, error) {
		desc, err := src.Resolve(ctx, d.String())
		if err != nil {
			return nil, err
		}
		if desc.Digest != d {
			return nil, fmt.Errorf("the registry answered %s for %s", desc.Digest, d)
		}
		return artifact.FetchManifest(ctx, src, desc)
	}
}

// refsOf lists the SBOMs ferry.json records, each fetched from src.
func refsOf(cfg *artifact.Config, src content.Fetcher, node nodeFunc, runs RunsFunc) []SBOMRef {
	var refs []SBOMRef
	for _, c := range cfg.Components {
		for _, img := range c.Images {
			for _, s := range img.SBOMs {
				loc := Location{Package: cfg.Name, Version: cfg.Version, Image: img.Ref, Platform: s.Platform, SBOM: s.Digest}
				if runs != nil {
					loc.Runs = runs(img, s)
				}
				refs = append(refs, SBOMRef{Location: loc, MediaType: s.ArtifactType, Size: s.Size, Fetch: fetchSBOM(src, node, img.Ref, s)})
			}
		}
	}
	return refs
}

// fetchSBOM opens the document of SBOM s of image ref: its referrer
// manifest (from node) is checked against ferry.json's record, its one
// layer fetched and checked against its digest as it is read.
func fetchSBOM(src content.Fetcher, node nodeFunc, ref string, s artifact.SBOM) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		layer, err := sbomLayer(ctx, node, ref, s)
		if err != nil {
			return nil, err
		}
		rc, err := src.Fetch(ctx, layer)
		if err != nil {
			return nil, &artifact.BlobError{Op: "fetch", Digest: layer.Digest, Err: err}
		}
		return &verified{vr: content.NewVerifyReader(rc, layer), rc: rc, desc: layer}, nil
	}
}

// sbomLayer reads the referrer manifest of s and returns its document's
// descriptor.
func sbomLayer(ctx context.Context, node nodeFunc, ref string, s artifact.SBOM) (ocispec.Descriptor, error) {
	data, err := node(ctx, s.Digest)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: SBOM %s of %s: %w", artifact.ErrCorrupt, s.Digest, ref, err)
	}
	if !isSBOMType(s.ArtifactType) || m.ArtifactType != s.ArtifactType || len(m.Layers) != 1 || m.Layers[0].MediaType != s.ArtifactType || m.Subject == nil || m.Subject.Digest != s.Subject {
		return ocispec.Descriptor{}, fmt.Errorf("%w: SBOM %s of %s is not the SBOM ferry.json records", artifact.ErrCorrupt, s.Digest, ref)
	}
	layer := m.Layers[0]
	if err := graph.CheckDescriptor(layer); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: SBOM %s: %w", artifact.ErrCorrupt, s.Digest, err)
	}
	if layer.Size > artifact.MaxSBOMSize {
		return ocispec.Descriptor{}, fmt.Errorf("SBOM %s of %s: %d bytes is more than %d", s.Digest, ref, layer.Size, artifact.MaxSBOMSize)
	}
	return layer, nil
}

// verified reads a blob and fails at its end if it does not match its
// descriptor.
type verified struct {
	vr   *content.VerifyReader
	rc   io.ReadCloser
	desc ocispec.Descriptor
	err  error
}

func (v *verified) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.vr.Read(p)
	if errors.Is(err, io.EOF) {
		if verr := v.vr.Verify(); verr != nil {
			v.err = &artifact.BlobError{Op: "verify", Digest: v.desc.Digest, Err: verr}
			return n, v.err
		}
	}
	return n, err
}

func (v *verified) Close() error { return v.rc.Close() }

// RegistrySource is the SBOMs of every ferry package a registry holds: each
// tag of each repository its catalog lists (only those under prefix, when
// not empty) that names a package root, each root read once. Listings are
// bounded as artifact.ListRepositories says, all of them together to
// MaxTags tags, every tag listed before any is resolved; at most
// MaxPackages roots are read, and their SBOMs refused as soon as they are
// more than MaxSBOMs.
func RegistrySource(reg registry.Registry, prefix string) Source {
	return &registrySource{reg: reg, prefix: strings.Trim(prefix, "/")}
}

type registrySource struct {
	reg    registry.Registry
	prefix string
}

func (s *registrySource) SBOMs(ctx context.Context) ([]SBOMRef, error) {
	var repos []string
	if err := artifact.ListRepositories(ctx, s.reg, func(page []string) error {
		for _, r := range page {
			if s.prefix == "" || r == s.prefix || strings.HasPrefix(r, s.prefix+"/") {
				repos = append(repos, r)
			}
		}
		return nil
	}); err != nil {
		return nil, artifact.ListFailed("list the repositories", err)
	}
	seen := map[digest.Digest]bool{}
	var refs []SBOMRef
	tagged := map[string][]string{}
	total := 0
	for _, name := range repos {
		repo, err := s.reg.Repository(ctx, name)
		if err != nil {
			return nil, err
		}
		if err := artifact.ListTags(ctx, repo, func(page []string) error {
			if total += len(page); total > MaxTags {
				return fmt.Errorf("the registry lists more than %d tags", MaxTags)
			}
			tagged[name] = append(tagged[name], page...)
			return nil
		}); err != nil {
			return nil, artifact.ListFailed("list the tags of "+name, err)
		}
	}
	for _, name := range repos {
		repo, err := s.reg.Repository(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, tag := range tagged[name] {
			d, err := repo.Resolve(ctx, tag)
			if errors.Is(err, errdef.ErrNotFound) {
				continue // deleted since listed
			}
			if err != nil {
				return nil, artifact.WithRef("resolve", name+":"+tag, err)
			}
			if d.MediaType != ocispec.MediaTypeImageIndex || seen[d.Digest] {
				continue
			}
			seen[d.Digest] = true
			if len(seen) > MaxPackages {
				return nil, fmt.Errorf("more than %d packages in the registry", MaxPackages)
			}
			more, err := PackageSource(repo, d.Digest.String()).SBOMs(ctx)
			if errors.Is(err, artifact.ErrNotPackage) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s:%s: %w", name, tag, err)
			}
			if refs = append(refs, more...); len(refs) > MaxSBOMs {
				return nil, fmt.Errorf("the registry's packages carry more than %d SBOMs", MaxSBOMs)
			}
		}
	}
	return refs, nil
}

// isSBOMType reports whether t is the media type of an SBOM format.
func isSBOMType(t string) bool {
	switch t {
	case definition.ArtifactTypeSPDX, definition.ArtifactTypeCycloneDX, definition.ArtifactTypeSyft:
		return true
	}
	return false
}
