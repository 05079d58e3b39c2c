package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
)

// A Reader is an oras target over the package, so that oras-go's functions
// and Copy read it as they read a registry or a layout store: Resolve
// through index.json, Exists and Fetch by digest, every fetched blob
// verified against its digest (the reader fails instead of ending when the
// bytes do not match). Fetch from an archive walks it to the blob, passing
// over the larger blobs before it unread where the archive allows (ferry's
// own .tar.zst and any .tar): the streaming walk that Copy and Verify use
// stays the fast path for reading a whole package (see the copy engine).
// Push and Tag write to the package what Sign adds: see write.go.
var _ oras.Target = (*Reader)(nil)

// Resolve resolves a reference to a descriptor of index.json: "" is the
// package root, a tag is the entry it names (the version for the root,
// sha256-<hex>.sig for its signature), a digest the entry with it.
func (r *Reader) Resolve(_ context.Context, reference string) (ocispec.Descriptor, error) {
	for _, d := range r.index.Manifests {
		if (reference == "" && d.Digest == r.root.Digest) || d.Annotations[ocispec.AnnotationRefName] == reference || d.Digest.String() == reference {
			desc := rootDescriptor(d)
			desc.ArtifactType = d.ArtifactType
			if d.Digest == r.root.Digest {
				desc.ArtifactType = ArtifactTypePackage
			}
			return desc, nil
		}
	}
	return ocispec.Descriptor{}, fmt.Errorf("%s: %s: %w", r.name, reference, errdef.ErrNotFound)
}

// Exists reports whether the package holds the blob. For an archive, the
// first call lists its blobs in one walk (small blobs read and verified,
// larger ones passed over).
func (r *Reader) Exists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	if _, ok := r.pending.get(desc); ok {
		return true, nil
	}
	if r.isDir {
		f, err := r.openBlobFile(desc)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return false, nil
			}
			return false, err
		}
		f.Close()
		return true, nil
	}
	sizes, err := r.blobSizes(ctx)
	if err != nil {
		return false, err
	}
	size, ok := sizes[desc.Digest]
	return ok && size == desc.Size, nil
}

// blobSizes lists an archive's blobs once.
func (r *Reader) blobSizes(ctx context.Context) (map[digest.Digest]int64, error) {
	l := r.list
	l.once.Do(func() {
		sizes := map[digest.Digest]int64{}
		rc := *r
		_, l.err = rc.walk(ctx, walkOptions{
			fn:   func(d ocispec.Descriptor, _ io.Reader) error { sizes[d.Digest] = d.Size; return nil },
			skip: func(d ocispec.Descriptor) bool { sizes[d.Digest] = d.Size; return true },
		})
		l.sizes = sizes
	})
	return l.sizes, l.err
}

// errFetched ends the walk of a Fetch once it has its blob.
var errFetched = errors.New("fetched")

// Fetch returns the blob's bytes, verified as they are read.
func (r *Reader) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	if err := graph.CheckDescriptor(desc); err != nil {
		return nil, err
	}
	if data, ok := r.pending.get(desc); ok {
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	if r.isDir {
		f, err := r.openBlobFile(desc)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return nil, fmt.Errorf("%s: %w: %w", desc.Digest, errdef.ErrNotFound, err)
			}
			return nil, err
		}
		return &verifiedFile{vr: content.NewVerifyReader(f, desc), f: f, desc: desc}, nil
	}
	if ok, err := r.Exists(ctx, desc); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%s: %s: %w", r.name, desc.Digest, errdef.ErrNotFound)
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	go func() {
		rc := *r
		_, err := rc.walk(ctx, walkOptions{
			skip: func(d ocispec.Descriptor) bool { return d.Digest != desc.Digest },
			fn: func(d ocispec.Descriptor, rd io.Reader) error {
				if d.Digest != desc.Digest {
					return nil
				}
				if _, err := io.Copy(pw, rd); err != nil {
					return err
				}
				return errFetched
			},
		})
		if errors.Is(err, errFetched) {
			err = nil
		} else if err == nil {
			err = fmt.Errorf("%s: %s: %w", r.name, desc.Digest, errdef.ErrNotFound)
		}
		pw.CloseWithError(err)
	}()
	return &fetchReader{PipeReader: pr, cancel: cancel}, nil
}

// verifiedFile reads a layout's blob file and, at its end, fails instead
// of ending when the bytes do not match the digest.
type verifiedFile struct {
	vr   *content.VerifyReader
	f    *os.File
	desc ocispec.Descriptor
}

func (v *verifiedFile) Read(p []byte) (int, error) {
	n, err := v.vr.Read(p)
	if err == io.EOF {
		if verr := v.vr.Verify(); verr != nil {
			return n, corruptBlobError(v.desc.Digest)
		}
	}
	return n, err
}

func (v *verifiedFile) Close() error { return v.f.Close() }

// fetchReader stops its walk when closed.
type fetchReader struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (f *fetchReader) Close() error {
	f.cancel()
	return f.PipeReader.Close()
}
