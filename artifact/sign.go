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

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
)

// SignOptions configures Sign and SignRemote. The zero value works.
type SignOptions struct {
	// Remote says how to reach the registry (SignRemote).
	Remote RemoteOptions
	// Progress, if set, receives progress reports.
	Progress ProgressFunc
}

// SignResult tells what a signing did.
type SignResult struct {
	Root digest.Digest `json:"root"`
	// Signature is the signature manifest now stored for the root.
	Signature ocispec.Descriptor `json:"signature"`
	// Signatures counts the signatures it holds; Added is false when the
	// key had already signed the root and nothing changed.
	Signatures int  `json:"signatures"`
	Added      bool `json:"added"`
}

// Sign signs the package's root digest with key and stores the signature
// in the package the way cosign stores it in a registry: a signature
// manifest tagged sha256-<hex>.sig in index.json. Existing signatures are
// kept (another key adds one; the same key again changes nothing). The
// package is verified first; the root digest never changes. An archive is
// rewritten atomically in its own format, a layout folder gets the new
// blobs and then a new index.json.
func Sign(ctx context.Context, r *Reader, key Signer, opts SignOptions) (*SignResult, error) {
	_, sum, err := inspect(ctx, r, opts.Progress)
	if err != nil {
		return nil, err
	}
	old := signatureEntries(r.root.Digest, r.index.Manifests)
	existing, err := localSignatures(r, sum)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Path(), err)
	}
	si, res, err := addSignature(key, r.root, r.config.Name, r.config, existing)
	if err != nil || !res.Added {
		if err == nil && len(old) > 0 {
			res.Signature = rootDescriptor(old[0])
		}
		return res, err
	}
	entries := withSignature(r.root.Digest, r.index.Manifests, si.desc)
	fetch := func(d ocispec.Descriptor) ([]byte, error) {
		if b, ok := si.blobs[d.Digest]; ok {
			return b, nil
		}
		if b, ok := sum.json[d.Digest]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("%w: manifest %s missing", ErrCorrupt, d.Digest)
	}
	descs, err := canonicalOrder(entries, fetch)
	if err != nil {
		return nil, err
	}
	if r.isDir {
		err = r.writeDirSignature(entries, descs, si, old, sum)
	} else {
		err = r.rewriteArchive(ctx, entries, descs, fetch, opts.Progress)
	}
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", r.Path(), err)
	}
	return res, nil
}

// SignRemote signs the package ref names in its registry: the signature
// manifest is pushed and tagged sha256-<hex>.sig beside the root, where
// `cosign verify` looks for it. Manifests are fetched and verified first.
func SignRemote(ctx context.Context, ref string, key Signer, opts SignOptions) (*SignResult, error) {
	p, repo, err := remotePlan(ctx, ref, opts.Remote)
	if err != nil {
		return nil, err
	}
	existing, err := p.signatures(ctx, repo)
	if err != nil {
		return nil, err
	}
	identity := repo.Reference.Registry + "/" + repo.Reference.Repository
	si, res, err := addSignature(key, p.root, identity, p.config, existing)
	if err != nil || !res.Added {
		if err == nil && len(p.index) > 1 {
			res.Signature = rootDescriptor(p.index[1])
		}
		return res, err
	}
	for d, data := range si.blobs {
		if d == si.desc.Digest {
			continue
		}
		desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: d, Size: int64(len(data))}
		ok, err := repo.Blobs().Exists(ctx, desc)
		if err != nil {
			return nil, &BlobError{Op: "check blob", Digest: d, Err: err}
		}
		if !ok {
			if err := repo.Blobs().Push(ctx, desc, bytes.NewReader(data)); err != nil {
				return nil, &BlobError{Op: "upload blob", Digest: d, Err: err}
			}
		}
	}
	tag := SignatureTag(p.root.Digest)
	if err := repo.PushReference(ctx, si.desc, bytes.NewReader(si.blobs[si.desc.Digest]), tag); err != nil {
		return nil, fmt.Errorf("push signature %s: %w", tag, err)
	}
	return res, nil
}

// addSignature signs root with key unless key already has a valid
// signature over it among existing, and builds the signature manifest
// holding existing signatures and the new one.
func addSignature(key Signer, root ocispec.Descriptor, identity string, cfg *Config, existing []signature) (*signatureImage, *SignResult, error) {
	res := &SignResult{Root: root.Digest, Signatures: len(existing)}
	if _, err := checkSignatures(root.Digest, existing, []Verifier{key}); err == nil {
		return nil, res, nil
	}
	sig, err := signPayload(key, root.Digest, identity, cfg)
	if err != nil {
		return nil, nil, err
	}
	si, err := newSignatureImage(root, append(existing, sig))
	if err != nil {
		return nil, nil, err
	}
	res.Signature, res.Signatures, res.Added = si.desc, len(existing)+1, true
	return si, res, nil
}

// withSignature returns index with root's signature entries replaced by
// sig, tagged as cosign tags it, at the end.
func withSignature(root digest.Digest, index []ocispec.Descriptor, sig ocispec.Descriptor) []ocispec.Descriptor {
	tag := SignatureTag(root)
	var out []ocispec.Descriptor
	for _, d := range index {
		if d.Digest == root || d.Annotations[ocispec.AnnotationRefName] != tag {
			out = append(out, d)
		}
	}
	s := rootDescriptor(sig)
	s.Annotations = map[string]string{ocispec.AnnotationRefName: tag}
	return append(out, s)
}

// localSignatures reads the signatures a walked package holds for its root.
func localSignatures(r *Reader, sum *Summary) ([]signature, error) {
	var manifests [][]byte
	for _, d := range signatureEntries(r.root.Digest, r.index.Manifests) {
		manifests = append(manifests, sum.Nodes[d.Digest].Data)
	}
	return readSignatures(manifests, func(d ocispec.Descriptor) ([]byte, error) {
		data, ok := sum.json[d.Digest]
		if !ok {
			return nil, fmt.Errorf("%w: signature payload %s is not a JSON document", ErrCorrupt, d.Digest)
		}
		return data, nil
	})
}

// signatures reads the signatures a remote package has for its root.
func (p *plan) signatures(ctx context.Context, repo *remote.Repository) ([]signature, error) {
	var manifests [][]byte
	for _, d := range p.index[1:] {
		b, ok := p.blobs[d.Digest]
		if !ok || b.data == nil {
			return nil, fmt.Errorf("signature manifest %s not fetched", d.Digest)
		}
		manifests = append(manifests, b.data)
	}
	return readSignatures(manifests, func(d ocispec.Descriptor) ([]byte, error) {
		return fetchSmall(ctx, repo.Blobs(), d)
	})
}

// rewriteArchive writes the archive again with a new index.json: blobs held
// in memory (fetch) are written from there, every other one is copied from
// the old archive as a cursor passes it — the canonical order of the new
// graph keeps the old one's order for every blob both hold. Written to a
// temporary file and renamed over the old archive.
func (r *Reader) rewriteArchive(ctx context.Context, entries, descs []ocispec.Descriptor, fetch jsonFetcher, progress ProgressFunc) error {
	p := &plan{blobs: map[digest.Digest]*blob{}, configData: r.configData, config: r.config, root: r.root, index: entries, mtime: archiveTime(r.config)}
	var err error
	if p.indexJSON, err = indexJSON(entries); err != nil {
		return err
	}
	return r.withTar(func(tr *tar.Reader, _ *zstReader) error {
		if _, err := r.readHead(tr); err != nil {
			return err
		}
		cur := &tarCursor{tr: tr}
		for _, d := range descs {
			if data, err := fetch(d); err == nil {
				p.blobs[d.Digest] = &blob{desc: d, data: data}
				continue
			}
			p.blobs[d.Digest] = &blob{desc: d, open: cur.open(d.Digest)}
		}
		_, err := writeFileAtomic(r.path, func(w io.Writer) error { return p.writeArchive(ctx, w, r.format, progress) })
		return err
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

// writeDirSignature stores a new signature manifest in a layout folder: its
// blobs first, then index.json (atomically), then it removes the blobs of
// the replaced signature manifest the new graph no longer uses.
func (r *Reader) writeDirSignature(entries, descs []ocispec.Descriptor, si *signatureImage, old []ocispec.Descriptor, sum *Summary) error {
	for d, data := range si.blobs {
		p := filepath.Join(r.path, filepath.FromSlash(blobPath(d)))
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if _, err := writeFileAtomic(p, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
			return err
		}
	}
	idx, err := indexJSON(entries)
	if err != nil {
		return err
	}
	if _, err := writeFileAtomic(filepath.Join(r.path, indexFileName), func(w io.Writer) error { _, err := w.Write(idx); return err }); err != nil {
		return err
	}
	keep := map[digest.Digest]bool{}
	for _, d := range descs {
		keep[d.Digest] = true
	}
	for _, m := range old {
		stale := []ocispec.Descriptor{m}
		if kids, err := children(m.MediaType, sum.Nodes[m.Digest].Data); err == nil {
			stale = append(stale, kids...)
		}
		for _, d := range stale {
			if !keep[d.Digest] {
				if err := os.Remove(filepath.Join(r.path, filepath.FromSlash(blobPath(d.Digest)))); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
		}
	}
	r.index.Manifests = entries
	return nil
}
