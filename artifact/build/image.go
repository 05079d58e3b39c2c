package build

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
)

// imageSource opens the store an image comes from and resolves it there.
func (b *builder) imageSource(ctx context.Context, img definition.Image) (content.ReadOnlyStorage, ocispec.Descriptor, string, error) {
	if img.Layout != "" {
		fsys, err := b.folder.Sub(img.Layout)
		if err != nil {
			return nil, ocispec.Descriptor{}, "", fmt.Errorf("OCI layout %s: %w", img.Layout, err)
		}
		store, err := oci.NewFromFS(ctx, fsys)
		if err != nil {
			return nil, ocispec.Descriptor{}, "", fmt.Errorf("open OCI layout %s: %w", img.Layout, err)
		}
		desc, err := store.Resolve(ctx, img.Tag)
		if err != nil {
			if d, err2 := store.Resolve(ctx, img.Ref); err2 == nil {
				desc, err = d, nil
			}
		}
		if err != nil {
			return nil, ocispec.Descriptor{}, "", fmt.Errorf("image %q not found in OCI layout %s", img.Tag, img.Layout)
		}
		return store, desc, "oci-layout:" + filepath.ToSlash(img.Layout) + ":" + img.Tag, nil
	}
	repo, err := b.opts.Remote.Repository(img.Ref)
	if err != nil {
		return nil, ocispec.Descriptor{}, "", err
	}
	desc, err := repo.Resolve(ctx, repo.Reference.Reference)
	if err != nil {
		return nil, ocispec.Descriptor{}, "", artifact.WithRef("resolve", img.Ref, err)
	}
	return repo, desc, img.Ref, nil
}

// image adds an image, filtered to the definition's platforms, with the
// signatures and attestations its source holds for it, and returns its
// stored descriptor with the record for ferry.json, the platform manifests
// it keeps, and the root entries of its signatures.
func (b *builder) image(ctx context.Context, component string, img definition.Image) (ocispec.Descriptor, artifact.Image, []keptManifest, []ocispec.Descriptor, error) {
	src, desc, source, err := b.imageSource(ctx, img)
	if err != nil {
		return desc, artifact.Image{}, nil, nil, err
	}
	rec := artifact.Image{Ref: img.Ref, Source: source, OriginalDigest: desc.Digest}
	if err := graph.CheckDescriptor(desc); err != nil {
		return desc, rec, nil, nil, err
	}
	data, err := artifact.FetchManifest(ctx, src, desc)
	if err != nil {
		return desc, rec, nil, nil, err
	}
	orig, origData := desc, data
	seen := map[digest.Digest]bool{}
	var kept []keptManifest
	switch {
	case graph.IsIndex(desc.MediaType):
		stored, k, err := b.selectPlatforms(ctx, src, desc, data, seen)
		if err != nil {
			return desc, rec, nil, nil, err
		}
		desc, kept = stored, k
		for _, m := range kept {
			rec.Platforms = append(rec.Platforms, m.platform)
		}
	case graph.IsManifest(desc.MediaType):
		platform, err := b.manifestPlatform(ctx, src, data, img)
		if err != nil {
			return desc, rec, nil, nil, err
		}
		if !b.wantPlatform(platform) {
			return desc, rec, nil, nil, fmt.Errorf("image is %s only; the package's platforms are %s", platform, b.platformList())
		}
		if err := b.node(ctx, src, desc, data, seen); err != nil {
			return desc, rec, nil, nil, err
		}
		rec.Platforms = []string{platform.String()}
		kept = []keptManifest{{desc: desc, platform: platform.String()}}
	default:
		return desc, rec, nil, nil, fmt.Errorf("unsupported image media type %q", desc.MediaType)
	}
	rec.Digest, rec.MediaType = desc.Digest, desc.MediaType
	for d := range seen {
		rec.Size += b.plan.Blobs[d].Desc.Size
	}
	stored := ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	sigs, recs, err := b.imageEvidence(ctx, src, component, img.Ref, orig, origData, stored, kept)
	if err != nil {
		return stored, rec, nil, nil, err
	}
	rec.Signatures = recs
	return stored, rec, kept, sigs, nil
}

// selectPlatforms keeps the index's manifests for the wanted platforms: the
// index itself when every platform is wanted, the one manifest when only one
// is, or a new index holding the wanted subset.
func (b *builder) selectPlatforms(ctx context.Context, src content.ReadOnlyStorage, desc ocispec.Descriptor, data []byte, seen map[digest.Digest]bool) (ocispec.Descriptor, []keptManifest, error) {
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return desc, nil, fmt.Errorf("%s: parse index: %w", desc.Digest, err)
	}
	var selected []ocispec.Descriptor
	var platforms []keptManifest
	var available []string
	nplatforms := 0
	for _, m := range idx.Manifests {
		if m.Platform == nil || m.Platform.OS == "unknown" {
			continue
		}
		nplatforms++
		p := definition.Platform{OS: m.Platform.OS, Architecture: m.Platform.Architecture, Variant: m.Platform.Variant}
		available = append(available, p.String())
		if b.wantPlatform(p) {
			selected = append(selected, m)
			platforms = append(platforms, keptManifest{desc: m, platform: p.String()})
		}
	}
	switch {
	case len(selected) == 0:
		return desc, nil, fmt.Errorf("no manifest for %s (the image has %s)", b.platformList(), strings.Join(available, ", "))
	case len(selected) == nplatforms:
		return desc, platforms, b.node(ctx, src, desc, data, seen)
	case len(selected) == 1:
		one := selected[0]
		oneData, err := artifact.FetchManifest(ctx, src, one)
		if err != nil {
			return desc, nil, err
		}
		return ocispec.Descriptor{MediaType: one.MediaType, Digest: one.Digest, Size: one.Size}, platforms, b.node(ctx, src, one, oneData, seen)
	}
	for _, m := range selected {
		mdata, err := artifact.FetchManifest(ctx, src, m)
		if err != nil {
			return desc, nil, err
		}
		if err := b.node(ctx, src, m, mdata, seen); err != nil {
			return desc, nil, err
		}
	}
	idx.Manifests = selected
	nd, _, err := b.addJSON(desc.MediaType, idx)
	seen[nd.Digest] = true
	return nd, platforms, err
}

// node adds a manifest or index (already fetched as data) and everything
// below it.
func (b *builder) node(ctx context.Context, src content.ReadOnlyStorage, desc ocispec.Descriptor, data []byte, seen map[digest.Digest]bool) error {
	kids, err := graph.Children(desc.MediaType, data)
	if err != nil {
		return fmt.Errorf("%s: %w", desc.Digest, err)
	}
	for _, k := range kids {
		if err := graph.CheckDescriptor(k); err != nil {
			return err
		}
		if graph.IsContainer(k.MediaType) {
			kdata, err := artifact.FetchManifest(ctx, src, k)
			if err != nil {
				return err
			}
			if err := b.node(ctx, src, k, kdata, seen); err != nil {
				return err
			}
			continue
		}
		seen[k.Digest] = true
		k := ocispec.Descriptor{MediaType: k.MediaType, Digest: k.Digest, Size: k.Size}
		b.add(&artifact.Blob{Desc: k, Open: func(ctx context.Context) (io.ReadCloser, error) { return src.Fetch(ctx, k) }})
	}
	seen[desc.Digest] = true
	b.add(&artifact.Blob{Desc: ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}, Data: data})
	return nil
}

// manifestPlatform reads an image manifest's platform from its config, or
// from the definition when the config names none.
func (b *builder) manifestPlatform(ctx context.Context, src content.ReadOnlyStorage, data []byte, def definition.Image) (definition.Platform, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return definition.Platform{}, fmt.Errorf("image %s: parse manifest: %w", def.Ref, err)
	}
	cfgData, err := artifact.FetchManifest(ctx, src, m.Config)
	if err != nil {
		return definition.Platform{}, fmt.Errorf("image %s: %w", def.Ref, err)
	}
	var img ocispec.Image
	if err := json.Unmarshal(cfgData, &img); err != nil {
		return definition.Platform{}, fmt.Errorf("image %s: parse its config %s: %w", def.Ref, m.Config.Digest, err)
	}
	named := definition.Platform{OS: img.OS, Architecture: img.Architecture, Variant: img.Variant}
	switch {
	case img.OS == "" || img.Architecture == "":
		if def.Platform != nil {
			return *def.Platform, nil
		}
		return definition.Platform{}, fmt.Errorf("image %s: its config %s names no os/architecture; say which platform it is for with `platform: os/arch` in its entry (with ref:)", def.Ref, m.Config.Digest)
	case def.Platform != nil && (def.Platform.OS != named.OS || def.Platform.Architecture != named.Architecture || (def.Platform.Variant != "" && def.Platform.Variant != named.Variant)):
		return definition.Platform{}, fmt.Errorf("image %s is %s (its config %s), not the %s its entry says", def.Ref, named, m.Config.Digest, def.Platform)
	}
	return named, nil
}

func (b *builder) wantPlatform(p definition.Platform) bool {
	for _, w := range b.def.Platforms {
		if w.OS != p.OS || w.Architecture != p.Architecture {
			continue
		}
		if w.Variant == "" || w.Variant == p.Variant || (w.Architecture == "arm64" && normArm64(w.Variant) == normArm64(p.Variant)) {
			return true
		}
	}
	return false
}

func normArm64(v string) string {
	if v == "v8" {
		return ""
	}
	return v
}

func (b *builder) platformList() string {
	var s []string
	for _, p := range b.def.Platforms {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}
