// Package mkimg builds one-layer container images around a single
// binary (at more paths as hard links, with files, programs, symbolic links
// and a host program's shared libraries beside it if asked), with no base
// image, for the e2e cluster: the same binary and
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
	"path"
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
	// Links are more paths of the binary in the image, as hard links to it
	// (e.g. "/bin/sh"); the folders they need are made (mode 0755). None if
	// empty.
	Links []string
	// Files are more regular files (mode 0644) by path, e.g.
	// "/standin.json". None if empty.
	Files map[string][]byte
	// Executables are more files of mode 0755 by path: programs, scripts,
	// shared libraries (HostFiles reads a host program's). None if empty.
	Executables map[string][]byte
	// Symlinks are symbolic links by path, to their targets (e.g.
	// "/bin/sh": "dash"). None if empty.
	Symlinks map[string]string
	// Entrypoint replaces the image's entrypoint, ["/"+Path] if nil; an
	// empty, non-nil slice leaves the image without one, so that a
	// container's arguments are its command (as under tini).
	Entrypoint []string
	// Env is the image's environment, e.g. "PATH=/usr/bin:/bin"; none if
	// empty.
	Env []string
	// WorkingDir is the image's working folder; the runtime's default (/)
	// if empty.
	WorkingDir string
	// User is the user the image runs as (e.g. "65532", for containers
	// that must run as non-root); root if empty.
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

	layer, err := buildLayer(binary, opts)
	if err != nil {
		return nil, err
	}

	entrypoint := opts.Entrypoint
	if entrypoint == nil {
		entrypoint = []string{"/" + opts.Path}
	}
	img := &Image{blobs: map[digest.Digest][]byte{}}
	img.Layer = img.add(ocispec.MediaTypeImageLayer, layer)
	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: opts.OS, Architecture: opts.Architecture},
		Config: ocispec.ImageConfig{
			Entrypoint: entrypoint,
			Cmd:        opts.Cmd,
			Env:        opts.Env,
			WorkingDir: opts.WorkingDir,
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

// buildLayer writes the layer's tar: the binary first (hard links name
// it), then folders, links and files in the order of their paths.
func buildLayer(binary []byte, opts Options) ([]byte, error) {
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	entries := map[string]entry{}
	add := func(name string, hdr *tar.Header, data []byte) error {
		p := strings.TrimPrefix(path.Clean("/"+name), "/")
		if p == "" || p == opts.Path {
			return fmt.Errorf("mkimg: path %q: taken by the binary", name)
		}
		if _, ok := entries[p]; ok {
			return fmt.Errorf("mkimg: path %q: given twice", name)
		}
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if e, ok := entries[dir]; ok && e.hdr.Typeflag != tar.TypeDir || dir == opts.Path {
				return fmt.Errorf("mkimg: path %q: %s is a file", name, dir)
			}
			entries[dir] = entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}}
		}
		hdr.Name = p
		entries[p] = entry{hdr, data}
		return nil
	}
	for _, l := range opts.Links {
		if err := add(l, &tar.Header{Typeflag: tar.TypeLink, Linkname: opts.Path, Mode: 0o755}, nil); err != nil {
			return nil, err
		}
	}
	for name, data := range opts.Files {
		if err := add(name, &tar.Header{Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}, data); err != nil {
			return nil, err
		}
	}
	for name, data := range opts.Executables {
		if err := add(name, &tar.Header{Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))}, data); err != nil {
			return nil, err
		}
	}
	for name, target := range opts.Symlinks {
		if target == "" {
			return nil, fmt.Errorf("mkimg: symbolic link %q: no target", name)
		}
		if err := add(name, &tar.Header{Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	write := func(hdr *tar.Header, data []byte) error {
		hdr.ModTime, hdr.Format = time.Unix(0, 0), tar.FormatUSTAR
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("mkimg: layer: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("mkimg: layer: %w", err)
		}
		return nil
	}
	if err := write(&tar.Header{Typeflag: tar.TypeReg, Name: opts.Path, Mode: 0o755, Size: int64(len(binary))}, binary); err != nil {
		return nil, err
	}
	for _, p := range slices.Sorted(maps.Keys(entries)) {
		if err := write(entries[p].hdr, entries[p].data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("mkimg: layer: %w", err)
	}
	return layer.Bytes(), nil
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
