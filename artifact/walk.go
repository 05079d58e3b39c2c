package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/ferrypkg/ferry/artifact/internal/zstdframe"
	"github.com/ferrypkg/ferry/internal/readahead"
)

// BlobFunc receives each blob of a package as Walk reads it. desc carries
// the digest and size (and the media type when known); the reader yields the
// blob's bytes, which Walk verifies once fn returns — a mismatch fails the
// walk, so side effects of fn must wait for Walk's verdict.
type BlobFunc func(desc ocispec.Descriptor, r io.Reader) error

// Summary is what a complete walk established.
type Summary struct {
	// Blobs is the number of distinct blobs, Size their total bytes.
	Blobs int
	Size  int64
	// Nodes holds every manifest and index reachable from index.json, by digest.
	Nodes map[digest.Digest]Node
	// json holds the small JSON blobs the graph check needs (manifests,
	// indexes, signature payloads), verified, by digest; order lists them
	// as stored.
	json  map[digest.Digest][]byte
	order []digest.Digest
	// partial is set when a delta's graph could not be checked below a
	// manifest or index it leaves out.
	partial bool
}

// Node is a manifest or index of the package graph.
type Node struct {
	Descriptor ocispec.Descriptor
	Data       []byte
}

// Walk reads every blob once, in stored order (children before parents),
// verifying each against its digest, calls fn (if not nil) for each, and
// finally checks the graph: every blob reachable from index.json present with
// its size, none left over, ferry.json equal to the package config blob,
// signatures shaped as cosign makes them. Memory stays bounded: only
// manifests, indexes and signature payloads are held (MaxGraphSize in all),
// and a package whose blobs exceed what ferry.json accounts for, or
// MaxBlobs, is refused as soon as the excess is seen.
func (r *Reader) Walk(ctx context.Context, fn BlobFunc, progress ProgressFunc) (*Summary, error) {
	return r.walk(ctx, walkOptions{fn: fn, progress: progress, graph: true})
}

// walkOptions configures one walk.
type walkOptions struct {
	fn       BlobFunc
	progress ProgressFunc
	// skip, if not nil, is asked (in stored order) about each blob larger
	// than MaxManifestSize; one it reports true for is passed over: not
	// read, not verified, not handed to fn. Several walks, each skipping
	// what the others take, read one package in parallel; each must run on
	// its own copy of the Reader.
	skip func(ocispec.Descriptor) bool
	// graph keeps the graph's JSON and checks the graph at the end; of
	// several parallel walks, one does.
	graph bool
	// completed holds, for a delta, the manifests and indexes it leaves
	// out, read back (and verified) from where it is being completed: the
	// graph check then goes below them, and refuses one the delta lists
	// as a blob. When nil, it stops there.
	completed map[digest.Digest][]byte
	// zeroCopy hands fn each large blob that lies whole in a raw frame of
	// an archive file as a rawBlob, which an upload over plain TCP sends
	// from the file and hashes where it lies (push).
	zeroCopy bool
}

func (r *Reader) walk(ctx context.Context, opts walkOptions) (*Summary, error) {
	w := &walker{r: r, walkOptions: opts, sizes: map[digest.Digest]int64{}, kept: map[digest.Digest][]byte{},
		budget: sizeBudget(r.config, len(r.configData)), buf: make([]byte, copyBufferSize), copyBuf: make([]byte, 256<<10)}
	var err error
	if r.isDir {
		err = w.walkDir(ctx)
	} else {
		err = r.withTar(func(a *archiveStream) error { w.z = a.z; return w.walkTar(ctx, a) })
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, r.damaged(ctx, err))
	}
	if !opts.graph {
		return &Summary{Blobs: w.blobs, Size: w.total}, nil
	}
	sum, err := w.finish()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, r.damaged(ctx, err))
	}
	return sum, nil
}

type walker struct {
	r *Reader
	walkOptions
	sizes    map[digest.Digest]int64  // by the walk that checks the graph
	blobs    int                      // blobs seen
	kept     map[digest.Digest][]byte // graphJSON blobs, for the graph check
	order    []digest.Digest          // kept, in stored order
	keptSize int64
	total    int64
	budget   int64  // the most bytes of blobs ferry.json accounts for
	buf      []byte // the prefetch chunks
	copyBuf  []byte
	// deltaSeen is set once a delta's ferry-delta.json entry is read.
	deltaSeen bool
	z         *zstdframe.Reader // what archive/tar reads, if the archive is zstd
}

// sizeBudget is the most bytes of blobs a package whose ferry.json is cfg
// (of n bytes) can hold: every image, chart, manifest bundle and file at the
// size ferry.json records (shared blobs counted each time), ferry.json
// itself, the root index and the package manifest, and the signatures. A
// blob beyond it cannot be part of the package; the graph check would
// refuse it at the end, the budget refuses it before it is read. Whether
// ferry.json tells the truth is checked against the graph.
func sizeBudget(cfg *Config, n int) int64 {
	if cfg == nil {
		return sizeCeiling
	}
	return min(claimedSize(cfg)+int64(n)+3*MaxManifestSize+MaxSignatures*MaxSignaturePayload, sizeCeiling)
}

// sizeCeiling bounds size sums, far from overflow.
const sizeCeiling = math.MaxInt64 / 4

// claimedSize adds up the sizes ferry.json records for its images, charts,
// manifest bundles, files and git repositories, and the images' SBOMs and
// signatures.
func claimedSize(cfg *Config) int64 {
	var b int64
	add := func(size int64) {
		if size > 0 {
			b = min(b+min(size, sizeCeiling), sizeCeiling)
		}
	}
	for _, c := range cfg.Components {
		for _, i := range c.Images {
			add(i.Size)
			for _, s := range i.SBOMs {
				add(s.Size)
			}
			for _, s := range i.Signatures {
				add(s.Size)
			}
		}
		for _, h := range c.Charts {
			add(h.Size)
		}
		for _, m := range c.Manifests {
			add(m.Size)
		}
		for _, f := range c.Files {
			add(f.Size)
		}
		for _, g := range c.Repositories {
			add(g.Size)
		}
		for _, a := range c.Advisories {
			add(a.Size)
		}
	}
	return b
}

func (w *walker) walkTar(ctx context.Context, a *archiveStream) error {
	tr := a.tr
	if _, err := w.r.readHead(tr); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := next(tr)
		if err == io.EOF {
			return a.end()
		}
		if err != nil {
			return err
		}
		if err := checkEntry(h); err != nil {
			return err
		}
		if h.Name == deltaFileName && len(dirs) == 0 && w.blobs == 0 && !w.deltaSeen {
			w.deltaSeen = true
			if err := w.r.checkDelta(tr, h); err != nil {
				return err
			}
			continue
		}
		if h.Typeflag == tar.TypeDir {
			if (h.Name != blobsDir && h.Name != blobsSHA256Dir) || dirs[h.Name] {
				return fmt.Errorf("%w: unexpected entry %.64q", ErrCorrupt, h.Name)
			}
			dirs[h.Name] = true
			continue
		}
		d, err := blobDigest(h.Name)
		if err != nil {
			return err
		}
		if _, dup := w.sizes[d]; dup && w.graph {
			return fmt.Errorf("%w: duplicate entry %q", ErrCorrupt, h.Name)
		}
		if err := w.blob(ocispec.Descriptor{Digest: d, Size: h.Size}, tr); err != nil {
			return err
		}
	}
}

// blobDigest parses an entry name blobs/sha256/<hex>.
func blobDigest(name string) (digest.Digest, error) {
	rest, ok := strings.CutPrefix(name, blobsSHA256Dir)
	if !ok {
		return "", fmt.Errorf("%w: unexpected entry %.64q", ErrCorrupt, name)
	}
	d := digest.NewDigestFromEncoded(digest.SHA256, rest)
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("%w: entry %.80q is not named by a sha256 digest", ErrCorrupt, name)
	}
	return d, nil
}

// blob verifies one blob read from src, handing it to fn on the way. fn's
// reader ends in a corruptBlobError instead of io.EOF when the bytes do
// not match the digest, so fn never takes a damaged blob for a whole one.
func (w *walker) blob(desc ocispec.Descriptor, src io.Reader) error {
	if w.blobs >= MaxBlobs {
		return fmt.Errorf("%w: more than %d blobs", ErrCorrupt, MaxBlobs)
	}
	if desc.Size < 0 || w.total+desc.Size > w.budget {
		return fmt.Errorf("%w: blob %s (%d bytes) is more than %s accounts for: the package's blobs may total %d bytes", ErrCorrupt, desc.Digest, desc.Size, ConfigFileName, w.budget)
	}
	if desc.Size > MaxManifestSize && w.skip != nil && w.skip(desc) {
		// Another walk verifies it, or it is not needed. Nothing is read:
		// archive/tar seeks past it (and fails on a truncated archive); a
		// layout folder's file need not be opened at all.
		w.seen(desc)
		return nil
	}
	var keep *bytes.Buffer
	if w.graph && desc.Size <= MaxManifestSize {
		keep = bytes.NewBuffer(make([]byte, 0, desc.Size))
	}
	if !desc.Digest.Algorithm().Available() {
		return fmt.Errorf("%w: blob %s: unsupported digest algorithm", ErrCorrupt, desc.Digest)
	}
	var rd io.Reader
	if rb, ok := w.rawBlob(desc, src, keep); ok {
		defer rb.Close()
		rd = rb
	} else {
		// Reading (I/O, decompression) and hashing run ahead on other cores
		// while fn works on what was read.
		pr := readahead.New(io.LimitReader(src, desc.Size), w.buf, desc.Digest.Algorithm().Hash())
		defer pr.Close()
		rd = io.TeeReader(&verifyingReader{pr: pr, want: desc.Digest}, writerOrDiscard(keep))
	}
	if w.fn != nil {
		if err := w.fn(desc, rd); err != nil {
			return err
		}
	}
	_, err := io.CopyBuffer(io.Discard, rd, w.copyBuf)
	_, corrupt := isCorruptBlob(err)
	switch {
	case corrupt:
		return err
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: archive is truncated", ErrCorrupt)
	case err != nil:
		return fmt.Errorf("%w: blob %s: %w", ErrCorrupt, desc.Digest, err)
	}
	if keep != nil && graphJSON(keep.Bytes()) {
		if w.keptSize += int64(keep.Len()); w.keptSize > MaxGraphSize {
			return fmt.Errorf("%w: its manifests, indexes and signatures total more than %d bytes", ErrCorrupt, MaxGraphSize)
		}
		w.kept[desc.Digest] = keep.Bytes()
		w.order = append(w.order, desc.Digest)
	}
	w.seen(desc)
	if w.progress != nil {
		w.progress(Progress{Phase: PhaseRead, Desc: desc, Bytes: desc.Size})
	}
	return nil
}

// rawBlob returns the large blob desc, about to be read from src, an
// archive's tar entry, as a rawBlob (see zeroCopy).
func (w *walker) rawBlob(desc ocispec.Descriptor, src io.Reader, keep *bytes.Buffer) (*zstdframe.RawBlob, bool) {
	if !w.zeroCopy || w.z == nil || w.fn == nil || keep != nil || desc.Size <= MaxManifestSize {
		return nil, false
	}
	return zstdframe.NewRawBlob(src, w.z, desc, w.buf), true
}

// seen counts a blob; the walk that checks the graph records its size. (Of
// parallel walks over a package of MaxBlobs blobs, each map would cost
// about 15 MiB.)
func (w *walker) seen(desc ocispec.Descriptor) {
	if w.graph {
		w.sizes[desc.Digest] = desc.Size
	}
	w.blobs++
	w.total += desc.Size
}

func writerOrDiscard(b *bytes.Buffer) io.Writer {
	if b == nil {
		return io.Discard
	}
	return b
}

func looksJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// graphJSON reports whether a small blob is one the graph check may need:
// JSON that names "manifests" (an index), "layers" (a manifest) or
// "critical" (a cosign signature payload). Configs, charts and files are
// not: a walk holds only these, so its memory does not grow with the blobs
// a package has, and a manifest that is not held cannot be in the graph
// (a manifest that spells its keys otherwise, with escapes, is refused).
// A byte search, not a parse: a hostile archive may hold many megabytes of
// JSON-looking blobs.
func graphJSON(b []byte) bool {
	return looksJSON(b) && (bytes.Contains(b, []byte(`"layers"`)) || bytes.Contains(b, []byte(`"manifests"`)) || bytes.Contains(b, []byte(`"critical"`)))
}

// finish checks the graph once every blob has been seen.
func (w *walker) finish() (*Summary, error) {
	sum := &Summary{Blobs: w.blobs, Size: w.total, Nodes: map[digest.Digest]Node{}, json: w.kept, order: w.order}
	reached := map[digest.Digest]bool{}
	var visit func(d ocispec.Descriptor) error
	visit = func(d ocispec.Descriptor) error {
		size, carried := w.sizes[d.Digest]
		if !carried {
			// A delta leaves it out: it comes from where the delta is pushed.
			var ok bool
			if size, ok = w.r.delta.omittedBlob(d.Digest); !ok {
				return fmt.Errorf("%w: blob %s missing", ErrCorrupt, d.Digest)
			}
		}
		if size != d.Size {
			return fmt.Errorf("%w: blob %s is %d bytes, its descriptor says %d", ErrCorrupt, d.Digest, size, d.Size)
		}
		if reached[d.Digest] {
			return nil
		}
		reached[d.Digest] = true
		if !graph.IsContainer(d.MediaType) {
			return nil
		}
		data, ok := w.kept[d.Digest]
		if !carried {
			if data, ok = w.completed[d.Digest]; !ok && w.completed != nil {
				// Read back as a blob: it is listed as something else.
				return fmt.Errorf("%w: %s lists %s as a blob, the package references it as a %s", ErrCorrupt, deltaFileName, d.Digest, d.MediaType)
			}
			if !ok {
				sum.partial = true // the graph below it is checked when the delta is completed
				return nil
			}
		}
		if !ok {
			return fmt.Errorf("%w: manifest %s is not a JSON manifest or index", ErrCorrupt, d.Digest)
		}
		sum.Nodes[d.Digest] = Node{Descriptor: d, Data: data}
		kids, err := graph.Children(d.MediaType, data)
		if err != nil {
			return fmt.Errorf("%w: blob %s: %w", ErrCorrupt, d.Digest, err)
		}
		for _, k := range kids {
			if err := graph.CheckDescriptor(k); err != nil {
				return fmt.Errorf("%w: blob %s: %w", ErrCorrupt, d.Digest, err)
			}
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range w.r.index.Manifests {
		if err := visit(d); err != nil {
			return nil, err
		}
	}
	for d := range w.sizes {
		if !reached[d] {
			return nil, fmt.Errorf("%w: blob %s is not referenced by the package", ErrCorrupt, d)
		}
	}
	if err := w.r.delta.check(w.sizes, reached, sum.partial); err != nil {
		return nil, err
	}
	for _, d := range signatureEntries(w.r.root.Digest, w.r.index.Manifests) {
		err := checkSignatureManifest(w.r.root.Digest, sum.Nodes[d.Digest].Data, func(l ocispec.Descriptor) ([]byte, error) {
			data, ok := w.kept[l.Digest]
			if !ok {
				return nil, fmt.Errorf("%w: signature payload %s is not a JSON document", ErrCorrupt, l.Digest)
			}
			return data, nil
		})
		if err != nil {
			return nil, err
		}
	}
	// The package manifest's config is ferry.json.
	rootNode := sum.Nodes[w.r.root.Digest]
	var root ocispec.Index
	if err := json.Unmarshal(rootNode.Data, &root); err != nil || w.r.root.MediaType != ocispec.MediaTypeImageIndex {
		return nil, fmt.Errorf("%w: the package root is not an image index", ErrCorrupt)
	}
	var pkg *ocispec.Descriptor
	for i, m := range root.Manifests {
		if m.Annotations[AnnotationKind] == KindPackage {
			pkg = &root.Manifests[i]
			break
		}
	}
	if pkg == nil {
		return nil, fmt.Errorf("%w: the package root has no package manifest", ErrCorrupt)
	}
	var pm ocispec.Manifest
	if err := json.Unmarshal(sum.Nodes[pkg.Digest].Data, &pm); err != nil || pm.Config.MediaType != MediaTypeConfig {
		return nil, fmt.Errorf("%w: package manifest %s has no ferry config", ErrCorrupt, pkg.Digest)
	}
	if digest.SHA256.FromBytes(w.r.configData) != pm.Config.Digest {
		return nil, fmt.Errorf("%w: %s differs from the package config blob %s", ErrCorrupt, ConfigFileName, pm.Config.Digest)
	}
	return sum, nil
}
