package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
)

// Archive is a destination of Copy: the package written as one archive,
// to a file (atomically: whole, or not at all) or to a writer. Pull copies
// into an ArchiveFile; Verify into ArchiveTo(io.Discard), which fetches and
// re-hashes every blob and keeps none. Its blobs are written in canonical
// order (children before parents, see canonicalOrder), so that the same
// package gives the same bytes — an order no oras target keeps, and the
// reason an Archive is Copy's own destination and not a target oras.Copy
// could fill: its oras.Target methods fail with errdef.ErrUnsupported.
// An Archive takes one package.
type Archive struct {
	path   string
	w      io.Writer
	format Format
	// verb names the copy in its write errors ("pull", "verify").
	verb string
	// After Copy: what was written, its size, the signatures checked.
	plan       *Plan
	size       int64
	signatures []VerifiedSignature
}

// ArchiveFile is an Archive written to the file at path, atomically, in
// format (if empty, taken from path: FormatFromPath). Nothing is written
// until the package's manifests, ferry.json and (with CopyOptions.Keys)
// signature have been read and checked.
func ArchiveFile(path string, format Format) *Archive {
	if format == "" {
		format = FormatFromPath(path)
	}
	return &Archive{path: path, format: format, verb: "write"}
}

// ArchiveTo is an Archive written to w in format.
func ArchiveTo(w io.Writer, format Format) *Archive {
	return &Archive{w: w, format: format, verb: "write"}
}

// Size is the archive's size in bytes, once Copy has written it.
func (a *Archive) Size() int64 { return a.size }

// copyTo is Copy into a: the graph ref names in src read by descriptor
// (manifests, indexes and ferry.json fetched and checked first), the
// signature checked against keys if any, then every blob fetched, verified
// and written in canonical order.
func (a *Archive) copyTo(ctx context.Context, src oras.ReadOnlyTarget, ref string, opts CopyOptions) (*CopyResult, error) {
	if a.plan != nil {
		return nil, errors.New("an Archive takes one package")
	}
	p, err := planFrom(ctx, src, ref)
	if err != nil {
		return nil, err
	}
	if len(opts.Keys) > 0 {
		if a.signatures, err = p.checkSignatures(ctx, src, ref, opts.Keys); err != nil {
			return nil, err
		}
	}
	write := func(w io.Writer) error { return p.WriteArchive(ctx, w, a.format, opts.Progress) }
	if a.path != "" {
		a.size, err = WriteFileAtomic(a.path, write)
	} else {
		cw := &countingWriter{w: a.w}
		err = write(cw)
		a.size = cw.n
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", a.verb, targetName(src, ref), err)
	}
	a.plan = p
	res := &CopyResult{Root: p.Root, Copied: len(p.Blobs)}
	for _, b := range p.Blobs {
		res.BytesCopied += b.Desc.Size
	}
	return res, nil
}

// countingWriter counts what it passes to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// An Archive is only Copy's destination (see Archive).
var _ oras.Target = (*Archive)(nil)

var errArchiveOnlyForCopy = fmt.Errorf("an Archive is written whole, by artifact.Copy: %w", errdef.ErrUnsupported)

// Fetch fails with errdef.ErrUnsupported.
func (a *Archive) Fetch(context.Context, ocispec.Descriptor) (io.ReadCloser, error) {
	return nil, errArchiveOnlyForCopy
}

// Exists fails with errdef.ErrUnsupported.
func (a *Archive) Exists(context.Context, ocispec.Descriptor) (bool, error) {
	return false, errArchiveOnlyForCopy
}

// Push fails with errdef.ErrUnsupported.
func (a *Archive) Push(context.Context, ocispec.Descriptor, io.Reader) error {
	return errArchiveOnlyForCopy
}

// Resolve fails with errdef.ErrUnsupported.
func (a *Archive) Resolve(context.Context, string) (ocispec.Descriptor, error) {
	return ocispec.Descriptor{}, errArchiveOnlyForCopy
}

// Tag fails with errdef.ErrUnsupported.
func (a *Archive) Tag(context.Context, ocispec.Descriptor, string) error {
	return errArchiveOnlyForCopy
}
