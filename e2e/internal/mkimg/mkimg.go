// Package mkimg builds one-layer container images around a single static
// binary, with no base image, for the e2e cluster: the same binary and
// Options always give the same bytes and digests (fixed tar headers, no
// timestamps, an uncompressed layer, canonical JSON).
//
// An Image is a content.ReadOnlyStorage, so oras.CopyGraph pushes it to any
// registry; WriteArchive writes it as an OCI image layout tar that
// `ctr images import` loads under its name.
package mkimg

import (
	"archive/tar"
	"bytes"
	"context"
	_ "crypto/sha256" // registers sha256 for go-digest
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
)

// AnnotationImageName is the index.json annotation containerd's importer
// takes an image's full name from (ctr images import).
const AnnotationImageName = "io.containerd.image.name"

// DefaultPath is where the binary goes in the image when Options.Path is
// empty: /tiny, as e2e/internal/tiny expects.
const DefaultPath = "tiny"

// Options describe the image around the binary. The zero value is valid.
type Options struct {
	// Path is the binary's file name in the image's root; DefaultPath if
	// empty. The image's entrypoint is "/"+Path.
	Path string
	// Cmd is the image's default arguments to the entrypoint; none if empty.
	Cmd []string
	// Labels are set in the image config. They change the config and
	// manifest digests, never the layer.
	Labels map[string]string
	// User is the image's user ("65534:65534" for a Pod that must run as
	// non-root); root if empty. Like Labels, it changes the config only.
	User string
	// OS and Architecture are the image's platform; linux and runtime.GOARCH
	// if empty.
	OS, Architecture string
}

// Image is a one-layer image held in memory.
type Image struct {
	// Manifest describes the image manifest, the root of the image.
	Manifest ocispec.Descriptor
	// Config and Layer describe the manifest's two children.
	Config, Layer ocispec.Descriptor

	blobs map[digest.Digest][]byte
}

var _ content.ReadOnlyStorage = (*Image)(nil)

// New builds the image holding binary as /Options.Path, mode 0755.
func New(binary []byte, opts Options) (*Image, error) {
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.OS == "" {
		opts.OS = "linux"
	}
	if opts.Architecture == "" {
		opts.Architecture = runtime.GOARCH
	}
	if strings.Contains(opts.Path, "/") || opts.Path == "." || opts.Path == ".." {
		return nil, fmt.Errorf("mkimg: path %q: want a plain file name", opts.Path)
	}

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: opts.Path, Mode: 0o755, Size: int64(len(binary)),
		ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("mkimg: layer: %w", err)
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, fmt.Errorf("mkimg: layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("mkimg: layer: %w", err)
	}

	img := &Image{blobs: map[digest.Digest][]byte{}}
	img.Layer = img.add(ocispec.MediaTypeImageLayer, layer.Bytes())
	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: opts.OS, Architecture: opts.Architecture},
		Config: ocispec.ImageConfig{
			Entrypoint: []string{"/" + opts.Path},
			Cmd:        opts.Cmd,
			Labels:     opts.Labels,
			User:       opts.User,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{img.Layer.Digest}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("mkimg: config: %w", err)
	}
	img.Config = img.add(ocispec.MediaTypeImageConfig, cfgJSON)
	manifest := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    img.Config,
		Layers:    []ocispec.Descriptor{img.Layer},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return nil, fmt.Errorf("mkimg: manifest: %w", err)
	}
	img.Manifest = img.add(ocispec.MediaTypeImageManifest, manifestJSON)
	img.Manifest.Platform = &cfg.Platform
	return img, nil
}

func (img *Image) add(mediaType string, b []byte) ocispec.Descriptor {
	d := digest.FromBytes(b)
	img.blobs[d] = b
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

// Fetch returns the blob desc names: the manifest, the config or the layer.
func (img *Image) Fetch(_ context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	b, ok := img.blobs[desc.Digest]
	if !ok || int64(len(b)) != desc.Size {
		return nil, fmt.Errorf("%s: %s: %w", desc.Digest, desc.MediaType, errdef.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Exists reports whether desc is one of the image's three blobs.
func (img *Image) Exists(_ context.Context, desc ocispec.Descriptor) (bool, error) {
	b, ok := img.blobs[desc.Digest]
	return ok && int64(len(b)) == desc.Size, nil
}

// WriteArchive writes the image as a tar of an OCI image layout whose
// index.json names it: name must be a tagged reference such as
// "ferry.local/tiny:e2e". The annotation io.containerd.image.name carries the
// full name (what `ctr images import` uses), org.opencontainers.image.ref.name
// the tag (what OCI layout readers resolve).
func (img *Image) WriteArchive(w io.Writer, name string) error {
	ref, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return fmt.Errorf("mkimg: image name %q: %w", name, err)
	}
	tagged, ok := ref.(reference.NamedTagged)
	if !ok {
		return fmt.Errorf("mkimg: image name %q: want a tag", name)
	}
	root := img.Manifest
	root.Annotations = map[string]string{
		AnnotationImageName:       tagged.String(),
		ocispec.AnnotationRefName: tagged.Tag(),
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{root},
	})
	if err != nil {
		return fmt.Errorf("mkimg: index.json: %w", err)
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return fmt.Errorf("mkimg: oci-layout: %w", err)
	}

	tw := tar.NewWriter(w)
	write := func(name string, b []byte) error {
		hdr := &tar.Header{Name: name, ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}
		if b == nil {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		} else {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(b))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("mkimg: archive %s: %w", name, err)
		}
		if _, err := tw.Write(b); err != nil {
			return fmt.Errorf("mkimg: archive %s: %w", name, err)
		}
		return nil
	}
	type entry struct {
		name string
		data []byte // nil for a folder
	}
	entries := []entry{
		{ocispec.ImageLayoutFile, layout},
		{ocispec.ImageIndexFile, index},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
	}
	for _, d := range slices.Sorted(maps.Keys(img.blobs)) {
		entries = append(entries, entry{"blobs/sha256/" + d.Encoded(), img.blobs[d]})
	}
	for _, e := range entries {
		if err := write(e.name, e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("mkimg: archive: %w", err)
	}
	return nil
}
