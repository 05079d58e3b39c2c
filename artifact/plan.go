package artifact

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// blob is one blob of a package being built: small ones are held in memory,
// large ones are opened from their source when written.
type blob struct {
	desc ocispec.Descriptor
	data []byte
	open func(ctx context.Context) (io.ReadCloser, error)
}

// plan is a package ready to be written.
type plan struct {
	blobs      map[digest.Digest]*blob
	configData []byte
	config     *Config
	root       ocispec.Descriptor
	// index lists index.json's entries: the root, then signatures.
	index     []ocispec.Descriptor
	indexJSON []byte
	mtime     time.Time
}

// sign adds key's signature over the root to a new package.
func (p *plan) sign(key Signer) error {
	si, _, err := addSignature(key, p.root, p.config.Name, p.config, nil)
	if err != nil {
		return err
	}
	for d, data := range si.blobs {
		p.blobs[d] = &blob{desc: ocispec.Descriptor{Digest: d, Size: int64(len(data))}, data: data}
	}
	p.blobs[si.desc.Digest].desc = si.desc
	p.index = withSignature(p.root.Digest, p.index, si.desc)
	p.indexJSON, err = layoutIndex(p.root, p.config.Version, p.index[1:])
	return err
}

// layoutIndex renders index.json: the root, tagged with the version, then
// any signatures.
func layoutIndex(root ocispec.Descriptor, version string, extra []ocispec.Descriptor) ([]byte, error) {
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

// fetchSmall fetches a manifest-sized blob, verified against its descriptor.
func fetchSmall(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor) ([]byte, error) {
	if err := checkDescriptor(desc); err != nil {
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
