package inject

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
)

// RegistryRepository is the repository path the in-cluster registry image
// is served under, by the injector and then by the registry itself.
const RegistryRepository = "ferry/registry"

// RegistryBinaryPath is where the registry binary sits in its image.
const RegistryBinaryPath = "/ferry-registry"

// ImageOptions describe a one-binary image.
type ImageOptions struct {
	// Arch is the GOARCH of Binary: "amd64" or "arm64".
	Arch string
	// Binary is a static executable, placed at Path with mode 0555.
	Binary []byte
	// Path is where the binary goes; RegistryBinaryPath if empty.
	Path string
	// Tag names the image in the layout's index.json; "latest" if empty.
	Tag string
}

// BuildImage writes a single-layer image holding one static binary, and
// nothing else (no base image, no shell), into a new OCI layout at dir and
// returns its manifest. The same binary gives the same digest: fixed
// mtimes and owners, gzip without name or time, canonical JSON.
func BuildImage(ctx context.Context, dir string, opts ImageOptions) (ocispec.Descriptor, error) {
	if opts.Path == "" {
		opts.Path = RegistryBinaryPath
	}
	if opts.Tag == "" {
		opts.Tag = "latest"
	}
	if opts.Arch != "amd64" && opts.Arch != "arm64" {
		return ocispec.Descriptor{}, fmt.Errorf("build image: unsupported architecture %q", opts.Arch)
	}
	var layer, gz bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: opts.Path[1:], Mode: 0o555, Size: int64(len(opts.Binary)),
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	}); err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := tw.Write(opts.Binary); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := tw.Close(); err != nil {
		return ocispec.Descriptor{}, err
	}
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := zw.Write(layer.Bytes()); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := zw.Close(); err != nil {
		return ocispec.Descriptor{}, err
	}
	config, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: opts.Arch},
		Config:   ocispec.ImageConfig{Entrypoint: []string{opts.Path}, User: "65532:65532"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(layer.Bytes())}},
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	store, err := oci.NewWithContext(ctx, dir)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	push := func(mediaType string, data []byte) (ocispec.Descriptor, error) {
		d := content.NewDescriptorFromBytes(mediaType, data)
		if err := store.Push(ctx, d, bytes.NewReader(data)); err != nil {
			return d, fmt.Errorf("build image: %w", err)
		}
		return d, nil
	}
	layerDesc, err := push(ocispec.MediaTypeImageLayerGzip, gz.Bytes())
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	configDesc, err := push(ocispec.MediaTypeImageConfig, config)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc, err := push(ocispec.MediaTypeImageManifest, manifest)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc.Platform = &ocispec.Platform{OS: "linux", Architecture: opts.Arch}
	if err := store.Tag(ctx, desc, opts.Tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	return desc, nil
}
