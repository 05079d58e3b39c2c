package artifact

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// Blob is one blob of a package being written: small ones are held in
// memory (Data), large ones opened from their source when written (Open).
type Blob struct {
	Desc ocispec.Descriptor
	Data []byte
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// Plan is a package ready to be written as an archive (WriteArchive):
// what build.Create assembles from a definition, and what Pull and Verify
// read from a target before they write it.
type Plan struct {
	// Blobs are every blob of the package, by digest.
	Blobs map[digest.Digest]*Blob
	// ConfigData is ferry.json's bytes, Config what they say.
	ConfigData []byte
	Config     *Config
	// Root is the package root.
	Root ocispec.Descriptor
	// Index lists index.json's entries: the root, then signatures;
	// IndexJSON is index.json's bytes (LayoutIndex).
	Index     []ocispec.Descriptor
	IndexJSON []byte
	// Mtime is the archive entries' modification time.
	Mtime time.Time
}

// Sign adds key's signature over the root to a new package.
func (p *Plan) Sign(key Signer) error {
	si, _, err := addSignature(key, p.Root, p.Config.Name, p.Config, nil)
	if err != nil {
		return err
	}
	for d, data := range si.blobs {
		p.Blobs[d] = &Blob{Desc: ocispec.Descriptor{Digest: d, Size: int64(len(data))}, Data: data}
	}
	p.Blobs[si.desc.Digest].Desc = si.desc
	p.Index = withSignature(p.Root.Digest, p.Index, si.desc)
	p.IndexJSON, err = LayoutIndex(p.Root, p.Config.Version, p.Index[1:])
	return err
}

// LayoutIndex renders index.json: the root, tagged with the version, then
// any signatures.
func LayoutIndex(root ocispec.Descriptor, version string, extra []ocispec.Descriptor) ([]byte, error) {
	r := root
	r.Annotations = map[string]string{ocispec.AnnotationRefName: version}
	return indexJSON(append([]ocispec.Descriptor{r}, extra...))
}

// indexJSON renders an index.json listing entries.
func indexJSON(entries []ocispec.Descriptor) ([]byte, error) {
	return json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: entries,
	})
}

// FetchManifest fetches a manifest-sized blob, verified against its descriptor.
func FetchManifest(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor) ([]byte, error) {
	if err := graph.CheckDescriptor(desc); err != nil {
		return nil, err
	}
	if desc.Size > MaxManifestSize {
		return nil, fmt.Errorf("%s: %d bytes is too large for a manifest or config", desc.Digest, desc.Size)
	}
	data, err := content.FetchAll(ctx, src, desc)
	if err != nil {
		return nil, &BlobError{Op: "fetch", Digest: desc.Digest, Err: err}
	}
	return data, nil
}
