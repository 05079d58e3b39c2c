package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
)

// A package is written to as an oras target for what signing adds to it: a
// signature manifest's blobs (Push), then the manifest named by cosign's
// tag (Tag). Its index.json names only the root and the root's signature
// manifest (checkIndex), so Tag takes only those.

// pendingBlobs holds the blobs pushed into an archive until Tag writes it.
type pendingBlobs struct {
	mu    sync.Mutex
	blobs map[digest.Digest][]byte
}

// get returns a pending blob's bytes.
func (p *pendingBlobs) get(desc ocispec.Descriptor) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, ok := p.blobs[desc.Digest]
	return data, ok && int64(len(data)) == desc.Size
}

// Push adds a blob to the package, verified against expected. A layout
// folder gets it at once (blobs/sha256/<hex>, written atomically); an
// archive holds it in memory until Tag writes the archive again, so it
// takes blobs of at most MaxManifestSize bytes (errdef.ErrUnsupported
// beyond). A blob the package has is errdef.ErrAlreadyExists.
func (r *Reader) Push(ctx context.Context, expected ocispec.Descriptor, body io.Reader) error {
	if err := graph.CheckDescriptor(expected); err != nil {
		return err
	}
	if r.isDir {
		p := filepath.Join(r.path, filepath.FromSlash(blobPath(expected.Digest)))
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s: %s: %w", r.name, expected.Digest, errdef.ErrAlreadyExists)
		}
		_, err := WriteFileAtomic(p, func(w io.Writer) error { return copyChecked(w, body, expected) })
		return err
	}
	if expected.Size > MaxManifestSize {
		return fmt.Errorf("%s: blob %s: an archive takes blobs of at most %d bytes: %w", r.name, expected.Digest, MaxManifestSize, errdef.ErrUnsupported)
	}
	var buf bytes.Buffer
	if err := copyChecked(&buf, body, expected); err != nil {
		return err
	}
	p := r.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.blobs[expected.Digest]; ok {
		return fmt.Errorf("%s: %s: %w", r.name, expected.Digest, errdef.ErrAlreadyExists)
	}
	if p.blobs == nil {
		p.blobs = map[digest.Digest][]byte{}
	}
	p.blobs[expected.Digest] = buf.Bytes()
	return nil
}

// copyChecked copies body to w and fails unless it is exactly desc's bytes.
func copyChecked(w io.Writer, body io.Reader, desc ocispec.Descriptor) error {
	vr := content.NewVerifyReader(body, desc)
	if _, err := io.Copy(w, vr); err != nil {
		return &BlobError{Op: "blob", Digest: desc.Digest, Err: err}
	}
	if err := vr.Verify(); err != nil {
		return corruptBlobError(desc.Digest)
	}
	return nil
}

// Tag names desc in the package's index.json. The root takes only the tag
// it has (its version; nothing changes); a signature manifest over the
// root, pushed with its blobs, takes cosign's tag (SignatureTag) and
// replaces the one index.json named. Any other tag is
// errdef.ErrUnsupported. A layout folder gets a new index.json (written
// atomically), then loses the replaced signature manifest's blobs that the
// package no longer uses; an archive is written again, atomically, in its
// own format, every blob verified as it is copied.
func (r *Reader) Tag(ctx context.Context, desc ocispec.Descriptor, reference string) error {
	return r.tag(ctx, desc, reference, nil)
}

// progressTagger is a target whose Tag can report progress: a package
// archive, written again whole.
type progressTagger interface {
	tag(ctx context.Context, desc ocispec.Descriptor, reference string, progress ProgressFunc) error
}

var _ progressTagger = (*Reader)(nil)

// tag is Tag, reporting the blobs an archive's rewrite writes.
func (r *Reader) tag(ctx context.Context, desc ocispec.Descriptor, reference string, progress ProgressFunc) error {
	root, sigTag := r.root, SignatureTag(r.root.Digest)
	if desc.Digest == root.Digest {
		if d, err := r.Resolve(ctx, reference); err == nil && d.Digest == root.Digest {
			return nil
		}
		return fmt.Errorf("%s: tag %q: a package's root is tagged with its version only: %w", r.name, reference, errdef.ErrUnsupported)
	}
	if reference != sigTag || desc.MediaType != ocispec.MediaTypeImageManifest {
		return fmt.Errorf("%s: tag %q: a package names only its root and the root's signature manifest (%s): %w", r.name, reference, sigTag, errdef.ErrUnsupported)
	}
	old := signatureEntries(root.Digest, r.index.Manifests)
	if len(old) == 1 && old[0].Digest == desc.Digest {
		return nil
	}
	entries := withSignature(root.Digest, r.index.Manifests, desc)
	if _, err := checkIndex(entries); err != nil {
		return err
	}
	var err error
	if r.isDir {
		err = r.tagDir(entries, desc, old)
	} else {
		err = r.tagArchive(ctx, entries, desc, progress)
	}
	if err != nil {
		return fmt.Errorf("%s: tag %s: %w", r.name, reference, err)
	}
	return nil
}

// tagDir writes a layout folder's new index.json, then removes the blobs
// of the replaced signature manifest the new graph does not use.
func (r *Reader) tagDir(entries []ocispec.Descriptor, sig ocispec.Descriptor, old []ocispec.Descriptor) error {
	fetch := func(d ocispec.Descriptor) ([]byte, error) { return r.readBlobFile(d) }
	descs, err := r.signedOrder(entries, sig, fetch)
	if err != nil {
		return err
	}
	for _, d := range descs {
		f, err := r.openBlobFile(d)
		if err != nil {
			return err
		}
		f.Close()
	}
	// What the replaced manifests held, read before index.json changes.
	var stale []ocispec.Descriptor
	for _, m := range old {
		stale = append(stale, m)
		if data, err := r.readBlobFile(m); err == nil {
			if kids, err := graph.Children(m.MediaType, data); err == nil {
				stale = append(stale, kids...)
			}
		}
	}
	idx, err := indexJSON(entries)
	if err != nil {
		return err
	}
	if _, err := WriteFileAtomic(filepath.Join(r.path, indexFileName), func(w io.Writer) error { _, err := w.Write(idx); return err }); err != nil {
		return err
	}
	r.index.Manifests = entries
	keep := map[digest.Digest]bool{}
	for _, d := range descs {
		keep[d.Digest] = true
	}
	for _, d := range stale {
		if !keep[d.Digest] {
			if err := os.Remove(filepath.Join(r.path, filepath.FromSlash(blobPath(d.Digest)))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// tagArchive writes the archive again with the new index.json and the
// pending blobs. The graph's manifests come from one walk that passes over
// every larger blob unread (seeking: ferry's .tar.zst and any .tar).
func (r *Reader) tagArchive(ctx context.Context, entries []ocispec.Descriptor, sig ocispec.Descriptor, progress ProgressFunc) error {
	rc := *r
	sum, err := rc.walk(ctx, walkOptions{skip: func(ocispec.Descriptor) bool { return true }, graph: true})
	if err != nil {
		return err
	}
	r.pending.mu.Lock()
	pending := r.pending.blobs
	r.pending.mu.Unlock()
	fetch := func(d ocispec.Descriptor) ([]byte, error) {
		if b, ok := pending[d.Digest]; ok {
			return b, nil
		}
		if b, ok := sum.json[d.Digest]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("%w: manifest %s missing", ErrCorrupt, d.Digest)
	}
	descs, err := r.signedOrder(entries, sig, fetch)
	if err != nil {
		return err
	}
	if err := r.rewriteArchive(ctx, entries, descs, fetch, progress); err != nil {
		return err
	}
	idx, err := indexJSON(entries)
	if err != nil {
		return err
	}
	r.index.Manifests = entries
	r.head = headDigest(r.configData, layoutFileData, idx)
	r.oneFrame = false
	r.list = &blobList{}
	r.pending.mu.Lock()
	r.pending.blobs = nil
	r.pending.mu.Unlock()
	return nil
}

// rewriteArchive writes the archive again with a new index.json: blobs held
// in memory (fetch) are written from there, every other one is copied from
// the old archive as a cursor passes it — the canonical order of the new
// graph keeps the old one's order for every blob both hold. Written to a
// temporary file and renamed over the old archive.
func (r *Reader) rewriteArchive(ctx context.Context, entries, descs []ocispec.Descriptor, fetch graph.JSONFetcher, progress ProgressFunc) error {
	p := &Plan{Blobs: map[digest.Digest]*Blob{}, ConfigData: r.configData, Config: r.config, Root: r.root, Index: entries, Mtime: archiveTime(r.config)}
	var err error
	if p.IndexJSON, err = indexJSON(entries); err != nil {
		return err
	}
	return r.withTar(func(a *archiveStream) error {
		tr := a.tr
		if _, err := r.readHead(tr); err != nil {
			return err
		}
		cur := &tarCursor{tr: tr}
		for _, d := range descs {
			if data, err := fetch(d); err == nil {
				p.Blobs[d.Digest] = &Blob{Desc: d, Data: data}
				continue
			}
			p.Blobs[d.Digest] = &Blob{Desc: d, Open: cur.open(d.Digest)}
		}
		return r.writeArchiveFile(func(w io.Writer) error { return p.WriteArchive(ctx, w, r.format, progress) })
	})
}

// tarCursor moves forward through an archive's blob entries.
type tarCursor struct{ tr *tar.Reader }

// open returns a function that skips to blob d and yields its bytes.
func (c *tarCursor) open(d digest.Digest) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		for {
			h, err := next(c.tr)
			if err == io.EOF {
				return nil, fmt.Errorf("%w: blob %s not found in archive order", ErrCorrupt, d)
			}
			if err != nil {
				return nil, err
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			if got, err := blobDigest(h.Name); err == nil && got == d {
				return io.NopCloser(c.tr), nil
			}
		}
	}
}

// signedOrder checks the new signature manifest sig (shaped as cosign makes
// it, over this package's root) and returns the graph of entries in the
// order ferry stores it; fetch reads its JSON blobs.
func (r *Reader) signedOrder(entries []ocispec.Descriptor, sig ocispec.Descriptor, fetch func(ocispec.Descriptor) ([]byte, error)) ([]ocispec.Descriptor, error) {
	data, err := fetch(sig)
	if err != nil {
		return nil, err
	}
	if err := checkSignatureManifest(r.root.Digest, data, fetch); err != nil {
		return nil, err
	}
	return graph.CanonicalOrder(entries, fetch)
}
