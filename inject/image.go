package inject

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// RegistryRepository is the repository path the in-cluster registry image
// is served under, by the injector and then by the registry itself.
const RegistryRepository = "ferry/registry"

// ImageOptions describe a one-binary image.
type ImageOptions struct {
	// Arch is the GOARCH of Binary: "amd64" or "arm64".
	Arch string
	// Binary is a static executable, placed at Path with mode 0555.
	Binary []byte
	// BinaryFile, when Binary is nil, is the file to take it from, read as
	// a stream: with Uncompressed, the image is built and pushed without
	// the binary in memory.
	BinaryFile string
	// Path is where the binary goes; cluster.RegistryBinaryPath if empty.
	Path string
	// Tag names the image in the layout's index.json; "latest" if empty.
	Tag string
	// Uncompressed stores the layer as a plain tar instead of gzip at the
	// best compression: much faster to build (a digest needs the bytes)
	// and to push, larger to store and pull.
	Uncompressed bool
}

// BuildImage writes a single-layer image holding one static binary, and
// nothing else (no base image, no shell), into a new OCI layout at dir and
// returns its manifest. The same binary gives the same digest: fixed
// mtimes and owners, gzip without name or time, canonical JSON.
func BuildImage(ctx context.Context, dir string, opts ImageOptions) (ocispec.Descriptor, error) {
	store, err := oci.NewWithContext(ctx, dir)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	return PushImage(ctx, store, opts)
}

// PushImage builds the image BuildImage describes into target (an OCI
// layout, a registry repository), pushing only the blobs target does not
// have yet, tags it and returns its manifest. When the tag names that
// manifest already, it does nothing more.
func PushImage(ctx context.Context, target oras.Target, opts ImageOptions) (ocispec.Descriptor, error) {
	if opts.Path == "" {
		opts.Path = cluster.RegistryBinaryPath
	}
	if opts.Tag == "" {
		opts.Tag = "latest"
	}
	if opts.Arch != "amd64" && opts.Arch != "arm64" {
		return ocispec.Descriptor{}, fmt.Errorf("build image: unsupported architecture %q", opts.Arch)
	}
	layer, err := newTarLayer(opts)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	diffID, size, err := layer.digest()
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: diffID, Size: size}
	var gz []byte
	if !opts.Uncompressed {
		if gz, err = gzipLayer(layer, diffID); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
		}
		layerDesc = content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayerGzip, gz)
	}
	config, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: opts.Arch},
		Config:   ocispec.ImageConfig{Entrypoint: []string{opts.Path}, User: "65532:65532"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	configDesc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, config)
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, manifest)
	desc.Platform = &ocispec.Platform{OS: "linux", Architecture: opts.Arch}
	// The tag names the manifest already: then its blobs are there too, and
	// there is nothing to do (one request to a registry instead of six).
	if cur, err := target.Resolve(ctx, opts.Tag); err == nil && cur.Digest == desc.Digest {
		return desc, nil
	}
	for _, b := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{layerDesc, gz}, {configDesc, config}, {desc, manifest}} {
		if ok, err := target.Exists(ctx, b.desc); err == nil && ok {
			continue
		}
		var r io.Reader = bytes.NewReader(b.data)
		if b.data == nil { // the uncompressed layer, streamed
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(layer.writeTo(pw)) }()
			r = pr
		}
		err := target.Push(ctx, b.desc, r)
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
		if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
		}
	}
	if err := target.Tag(ctx, desc, opts.Tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("build image: %w", err)
	}
	return desc, nil
}

// tarLayer is the tar stream of a one-file layer, written from its parts
// (header, the binary, padding and end) without a copy of the binary.
type tarLayer struct {
	header, tail []byte
	binary       []byte // or, when nil:
	file         string
	size         int64
}

func newTarLayer(opts ImageOptions) (*tarLayer, error) {
	l := &tarLayer{binary: opts.Binary, file: opts.BinaryFile, size: int64(len(opts.Binary))}
	if opts.Binary == nil {
		fi, err := os.Stat(opts.BinaryFile)
		if err != nil {
			return nil, err
		}
		l.size = fi.Size()
	}
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: opts.Path[1:], Mode: 0o555, Size: l.size,
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	// What tar.Writer writes after the data: zeros to the block, and the
	// two zero blocks that end the archive.
	l.header, l.tail = hdr.Bytes(), make([]byte, (512-l.size%512)%512+1024)
	return l, nil
}

// writeTo writes the whole tar stream to w.
func (l *tarLayer) writeTo(w io.Writer) error {
	if _, err := w.Write(l.header); err != nil {
		return err
	}
	if l.binary != nil {
		if _, err := w.Write(l.binary); err != nil {
			return err
		}
	} else {
		f, err := os.Open(l.file)
		if err != nil {
			return err
		}
		n, err := io.Copy(w, f)
		f.Close()
		if err == nil && n != l.size {
			err = fmt.Errorf("%s changed while read", l.file)
		}
		if err != nil {
			return err
		}
	}
	_, err := w.Write(l.tail)
	return err
}

// len is the size of the tar stream.
func (l *tarLayer) len() int64 { return int64(len(l.header)+len(l.tail)) + l.size }

// digest returns the digest and size of the stream.
func (l *tarLayer) digest() (digest.Digest, int64, error) {
	d := digest.Canonical.Digester()
	if err := l.writeTo(d.Hash()); err != nil {
		return "", 0, err
	}
	return d.Digest(), l.len(), nil
}
