package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// A Reader is a read-only oras target over the package, so that oras-go's
// functions and Copy read it as they read a registry or a layout store:
// Resolve through index.json, Exists and Fetch by digest, every fetched
// blob verified against its digest (the reader fails instead of ending when
// the bytes do not match). Fetch from an archive walks it to the blob,
// passing over the larger blobs before it unread where the archive allows
// (ferry's own .tar.zst and any .tar): the streaming walk that Push and
// Verify use stays the fast path for reading a whole package.
var _ oras.ReadOnlyTarget = (*Reader)(nil)

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
	if err := checkDescriptor(desc); err != nil {
		return nil, err
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

// CopyOptions configures Copy. The zero value works.
type CopyOptions struct {
	// Concurrency bounds the blobs copied at once; if ≤ 0, oras-go's
	// default (3). A package pushed to a registry uses PushOptions'
	// streams instead.
	Concurrency int
	// Push configures the streaming push that a copy from a package to a
	// registry is (its Remote is not used: the repository is given).
	Push PushOptions
	// Progress, if set, receives an event per blob copied or found.
	Progress ProgressFunc
}

// Copy copies the package that srcRef names in src ("" for a package's
// root) — the root, everything it reaches, and the signature manifest
// stored for it (tagged sha256-<hex>.sig) — into dst, the root tagged
// dstRef (no tag if dstRef is empty or a digest). Any two oras targets
// work: a package (*Reader), a registry repository (*remote.Repository),
// an OCI layout store (content/oci), memory (content/memory). Blobs dst
// has are not copied. From a package to a registry it is Push's streaming
// walk (every blob read once, large blobs in parallel streams, verified).
func Copy(ctx context.Context, src oras.ReadOnlyTarget, srcRef string, dst oras.Target, dstRef string, opts CopyOptions) (ocispec.Descriptor, error) {
	if r, ok := src.(*Reader); ok && (srcRef == "" || srcRef == r.root.Digest.String()) {
		if repo, ok := dst.(*remote.Repository); ok {
			po := opts.Push
			if po.Progress == nil {
				po.Progress = opts.Progress
			}
			if _, err := push(ctx, r, repo, dstRef, po); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("copy to %s: %w", repo.Reference, err)
			}
			return r.Resolve(ctx, "")
		}
	}
	co := oras.CopyOptions{}
	co.Concurrency = opts.Concurrency
	if opts.Progress != nil {
		// oras-go calls these from its workers: a ProgressFunc is safe for
		// concurrent use.
		report := func(desc ocispec.Descriptor, skipped bool) {
			ev := Progress{Phase: PhaseCopy, Desc: desc, Skipped: skipped}
			if !skipped {
				ev.Bytes = desc.Size
			}
			opts.Progress(ev)
		}
		co.PostCopy = func(_ context.Context, d ocispec.Descriptor) error { report(d, false); return nil }
		co.OnCopySkipped = func(_ context.Context, d ocispec.Descriptor) error { report(d, true); return nil }
	}
	root, err := src.Resolve(ctx, srcRef)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := oras.CopyGraph(ctx, src, dst, root, co.CopyGraphOptions); err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := digest.Parse(dstRef); err != nil && dstRef != "" {
		if err := dst.Tag(ctx, root, dstRef); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", dstRef, err)
		}
	}
	// The signature travels with its tag, where cosign and Verify look.
	sigTag := SignatureTag(root.Digest)
	sig, err := src.Resolve(ctx, sigTag)
	switch {
	case errors.Is(err, errdef.ErrNotFound):
		return root, nil
	case err != nil:
		return ocispec.Descriptor{}, err
	}
	if err := oras.CopyGraph(ctx, src, dst, sig, co.CopyGraphOptions); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("copy signature %s: %w", sig.Digest, err)
	}
	if err := dst.Tag(ctx, sig, sigTag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", sigTag, err)
	}
	return root, nil
}
