package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
)

// SBOMRequest says which image manifest an SBOMGenerator describes, and how.
type SBOMRequest struct {
	// Ref is the image's original reference, e.g. docker.io/library/nginx:1.27.
	Ref string
	// Manifest is the image manifest of one platform; the Fetcher given
	// with the request holds it, its config and its layers.
	Manifest ocispec.Descriptor
	// Platform is the manifest's platform, os/arch[/variant].
	Platform string
	// Format is the document format; "" is SBOMFormatSPDX.
	Format definition.SBOMFormat
	// Created is the time the document must state as its creation time,
	// so that the same image gives the same bytes.
	Created time.Time
}

// SBOMGenerator makes the SBOM of an image manifest. Package
// artifact/sbomexec has one that runs the ferry-sbom helper (Syft).
type SBOMGenerator interface {
	// GenerateSBOM returns the document describing req.Manifest, whose
	// blobs src holds (unverified: the generator checks each against its
	// descriptor). The same request must give the same bytes.
	GenerateSBOM(ctx context.Context, src content.Fetcher, req SBOMRequest) ([]byte, error)
}

// SBOMFormatGenerator is an SBOMGenerator that may answer in a format
// other than req.Format: one serving documents already made, such as the
// Syft documents of a Zarf package. Create calls GenerateSBOMFormat
// instead of GenerateSBOM and records the format it returns.
type SBOMFormatGenerator interface {
	SBOMGenerator
	// GenerateSBOMFormat is GenerateSBOM, also returning the document's
	// format.
	GenerateSBOMFormat(ctx context.Context, src content.Fetcher, req SBOMRequest) ([]byte, definition.SBOMFormat, error)
}

// ErrNoSBOM is returned by an SBOMGenerator that has no document for a
// manifest (one serving documents already made): create records no SBOM
// for that manifest and goes on.
var ErrNoSBOM = errors.New("no SBOM for this manifest")

// sboms makes the SBOM of each kept manifest of image ref and adds it as a
// referrer; it returns the root index entries and the ferry.json records.
func (b *builder) sboms(ctx context.Context, component, ref string, kept []keptManifest) ([]ocispec.Descriptor, []artifact.SBOM, error) {
	if b.opts.SBOM == nil || b.def.SBOM.Disabled {
		return nil, nil, nil
	}
	format := b.def.SBOM.Format
	if format == "" {
		format = definition.SBOMFormatSPDX
	}
	var entries []ocispec.Descriptor
	var recs []artifact.SBOM
	for _, k := range kept {
		req := SBOMRequest{Ref: ref, Manifest: k.desc, Platform: k.platform, Format: format, Created: b.plan.Mtime}
		format := format
		var doc []byte
		var err error
		if g, ok := b.opts.SBOM.(SBOMFormatGenerator); ok {
			doc, format, err = g.GenerateSBOMFormat(ctx, builderFetcher{b}, req)
			if err == nil && !slices.Contains(definition.SBOMFormats, format) {
				err = fmt.Errorf("unknown SBOM format %q", format)
			}
		} else {
			doc, err = b.opts.SBOM.GenerateSBOM(ctx, builderFetcher{b}, req)
		}
		switch {
		case errors.Is(err, ErrNoSBOM):
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("SBOM of %s (%s, %s): %w", ref, k.platform, k.desc.Digest, err)
		case len(doc) > artifact.MaxSBOMSize:
			return nil, nil, fmt.Errorf("SBOM of %s (%s, %s): %d bytes is more than %d", ref, k.platform, k.desc.Digest, len(doc), artifact.MaxSBOMSize)
		}
		layer := b.addData(format.ArtifactType(), doc)
		layer.Annotations = map[string]string{ocispec.AnnotationTitle: format.FileName()}
		empty := b.addData(ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data)
		empty.Data = ocispec.DescriptorEmptyJSON.Data
		subject := ocispec.Descriptor{MediaType: k.desc.MediaType, Digest: k.desc.Digest, Size: k.desc.Size}
		m := ocispec.Manifest{
			Versioned:    specs.Versioned{SchemaVersion: 2},
			MediaType:    ocispec.MediaTypeImageManifest,
			ArtifactType: format.ArtifactType(),
			Config:       empty,
			Layers:       []ocispec.Descriptor{layer},
			Subject:      &subject,
		}
		md, _, err := b.addJSON(ocispec.MediaTypeImageManifest, m)
		if err != nil {
			return nil, nil, err
		}
		md.ArtifactType = format.ArtifactType()
		md.Annotations = map[string]string{
			artifact.AnnotationKind: artifact.KindSBOM, artifact.AnnotationComponent: component,
			artifact.AnnotationImageRef: ref, artifact.AnnotationPlatform: k.platform,
		}
		entries = append(entries, md)
		recs = append(recs, artifact.SBOM{Platform: k.platform, Subject: k.desc.Digest, Digest: md.Digest,
			ArtifactType: format.ArtifactType(), Size: md.Size + empty.Size + layer.Size})
		b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: "sbom " + ref + " " + k.platform})
	}
	return entries, recs, nil
}

// builderFetcher fetches the blobs of a package being built.
type builderFetcher struct{ b *builder }

func (f builderFetcher) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	bl, ok := f.b.plan.Blobs[desc.Digest]
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: %w", desc.Digest, errdef.ErrNotFound)
	case bl.Data != nil:
		return io.NopCloser(bytes.NewReader(bl.Data)), nil
	}
	return bl.Open(ctx)
}

// keptManifest is an image manifest create keeps, with its platform.
type keptManifest struct {
	desc     ocispec.Descriptor
	platform string
}
