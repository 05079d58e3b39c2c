package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/internal/chunk"
)

// Errors a reader reports; match them with errors.Is.
var (
	// ErrNotPackage means the input is not a ferry package.
	ErrNotPackage = errors.New("not a ferry package")
	// ErrCorrupt means the package is damaged or tampered with.
	ErrCorrupt = errors.New("package is corrupt")
	// ErrUnsafeEntry means an archive entry could escape its folder or is not a plain file.
	ErrUnsafeEntry = errors.New("unsafe archive entry")
)

// Reader reads a package from an archive (.tar or .tar.zst) or an OCI
// layout folder. Open reads only the head; Walk streams and verifies the rest.
type Reader struct {
	path   string
	isDir  bool
	format Format // of an archive: tar or tar.zst, as read
	// Config is ferry.json, ConfigData its exact bytes.
	Config     *Config
	ConfigData []byte
	// Index is the layout's index.json; Root the package root it names.
	Index ocispec.Index
	Root  ocispec.Descriptor
	// head is the digest of the head (ferry.json, oci-layout, index.json)
	// as Open read it: a later walk refuses an archive whose head changed,
	// so what was verified is what is pushed.
	head digest.Digest
	// oneFrame is set for a .tar.zst that is one zstd frame: it can only be
	// read from its start by decompressing all of it.
	oneFrame bool
}

// Open opens a package archive or layout folder and reads its head:
// ferry.json and index.json. Nothing is verified against digests until Walk.
func Open(ctx context.Context, p string) (*Reader, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	r := &Reader{path: p, isDir: fi.IsDir()}
	if r.isDir {
		err = r.openDir()
	} else {
		err = r.openArchive()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return r, nil
}

// Path is where the package was opened from.
func (r *Reader) Path() string { return r.path }

// openArchive reads the three leading entries of an archive. A .tar.zst
// whose ferry.json accounts for more than MaxExpansion times its size is
// refused there: a real package's blobs compress less than that, a zstd
// bomb's much more.
func (r *Reader) openArchive() error {
	var size int64
	err := r.withTar(func(tr *tar.Reader, z *zstReader) error {
		if _, err := r.readHead(tr); err != nil {
			return err
		}
		r.format = FormatTar
		if z != nil {
			r.format, size = FormatTarZstd, z.size
			// A frame still being decoded that ends at the end of the file:
			// the archive is one zstd frame (zstd or tar --zstd made it).
			r.oneFrame = z.decoding && z.next == z.size
		}
		return nil
	})
	if err != nil {
		return err
	}
	if claimed := claimedSize(r.Config); r.format == FormatTarZstd && claimed > expansionFloor+MaxExpansion*size {
		return fmt.Errorf("%w: %s accounts for %d bytes of blobs, more than %d times the archive's %d bytes (a zstd bomb?)", ErrCorrupt, ConfigFileName, claimed, MaxExpansion, size)
	}
	return nil
}

// withTar opens the archive, which must be a regular file, undoing zstd
// when present, and hands its tar stream to fn, with the zstd reader (nil
// for a plain tar). It writes nothing into r: parallel walks share it. Both streams can Seek forward, so archive/tar skips the
// data of entries fn leaves unread without reading it (a .tar.zst's raw
// frames; see zstReader).
func (r *Reader) withTar(fn func(*tar.Reader, *zstReader) error) error {
	f, fi, err := openRegular(r.path, r.path)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [4]byte
	_, _ = f.ReadAt(magic[:], 0)
	var src io.Reader = f
	var z *zstReader
	if bytes.Equal(magic[:], zstdMagic) {
		if z, err = newZstReader(f, fi.Size()); err != nil {
			return err
		}
		defer z.Close()
		src = z
	}
	return fn(tar.NewReader(src), z)
}

// next returns the next tar entry, mapping stream damage to ErrCorrupt.
func next(tr *tar.Reader) (*tar.Header, error) {
	h, err := tr.Next()
	switch {
	case err == io.EOF:
		return nil, err
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: archive is truncated", ErrCorrupt)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return h, nil
}

// readEntry reads a small entry whole.
func readEntry(tr *tar.Reader, h *tar.Header) ([]byte, error) {
	if h.Size > MaxManifestSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a package allows", ErrCorrupt, h.Name, h.Size, MaxManifestSize)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: archive is truncated", ErrCorrupt)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, h.Name, err)
	}
	return data, nil
}

// readHead reads ferry.json, oci-layout and index.json, which must lead the archive.
func (r *Reader) readHead(tr *tar.Reader) (int, error) {
	want := []string{ConfigFileName, layoutFileName, indexFileName}
	var data [3][]byte
	for i, name := range want {
		h, err := next(tr)
		if err == io.EOF {
			if i == 0 {
				return 0, fmt.Errorf("%w: empty archive", ErrNotPackage)
			}
			return 0, fmt.Errorf("%w: archive is truncated", ErrCorrupt)
		}
		if err != nil {
			return 0, err
		}
		if err := checkEntry(h); err != nil {
			return 0, err
		}
		if h.Name != name {
			if i == 0 {
				return 0, fmt.Errorf("%w: first entry is %q, not %s", ErrNotPackage, h.Name, ConfigFileName)
			}
			return 0, fmt.Errorf("%w: entry %d is %q, want %s", ErrCorrupt, i+1, h.Name, name)
		}
		if data[i], err = readEntry(tr, h); err != nil {
			return 0, err
		}
	}
	if err := r.setHead(data[0], data[1], data[2]); err != nil {
		return 0, err
	}
	return len(want), nil
}

// headDigest identifies a package's head: ferry.json, oci-layout and
// index.json, each with its length.
func headDigest(parts ...[]byte) digest.Digest {
	d := digest.SHA256.Digester()
	for _, p := range parts {
		fmt.Fprintf(d.Hash(), "%d\n", len(p))
		d.Hash().Write(p)
	}
	return d.Digest()
}

// setHead parses and checks ferry.json, oci-layout and index.json. Read
// again by a later walk, the head must be the one Open read.
func (r *Reader) setHead(configData, layout, index []byte) error {
	head := headDigest(configData, layout, index)
	if r.head != "" {
		if head != r.head {
			return fmt.Errorf("%w: the package changed since it was opened (its ferry.json, oci-layout or index.json differ)", ErrCorrupt)
		}
		return nil
	}
	var l ocispec.ImageLayout
	if err := json.Unmarshal(layout, &l); err != nil || l.Version != ocispec.ImageLayoutVersion {
		return fmt.Errorf("%w: invalid oci-layout", ErrCorrupt)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(index, &idx); err != nil {
		return fmt.Errorf("%w: index.json: %v", ErrCorrupt, err)
	}
	root, err := checkIndex(idx.Manifests)
	if err != nil {
		return err
	}
	if err := r.setConfig(configData); err != nil {
		return err
	}
	r.Index, r.Root, r.head = idx, root, head
	return nil
}

// checkIndex checks index.json's entries and returns the package root. A
// package is its root, what the root reaches, and signatures over the
// root: index.json names the root and, at most once, the signature
// manifest cosign tags for it (SignatureTag). Any other entry — an image, a
// second root, a manifest tagged like the package's version — is covered
// by no signature, and would be pushed and tagged beside the package, so
// it is refused before anything is read or written.
func checkIndex(entries []ocispec.Descriptor) (ocispec.Descriptor, error) {
	var roots []ocispec.Descriptor
	for _, d := range entries {
		if err := checkDescriptor(d); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("%w: index.json: %v", ErrCorrupt, err)
		}
		if d.ArtifactType == ArtifactTypePackage {
			roots = append(roots, d)
		}
	}
	switch {
	case len(roots) == 0:
		return ocispec.Descriptor{}, fmt.Errorf("%w: index.json names no package root", ErrNotPackage)
	case len(roots) > 1:
		return ocispec.Descriptor{}, fmt.Errorf("%w: index.json names %d package roots", ErrCorrupt, len(roots))
	}
	root := roots[0]
	if root.MediaType != ocispec.MediaTypeImageIndex {
		return ocispec.Descriptor{}, fmt.Errorf("%w: the package root %s is a %q, not an image index", ErrCorrupt, root.Digest, root.MediaType)
	}
	if root.Size > MaxManifestSize {
		return ocispec.Descriptor{}, fmt.Errorf("%w: the package root %s is %d bytes, more than the %d a manifest may have", ErrCorrupt, root.Digest, root.Size, MaxManifestSize)
	}
	sigTag, sigs := SignatureTag(root.Digest), 0
	for i, d := range entries {
		if d.ArtifactType == ArtifactTypePackage {
			continue
		}
		if d.Digest != root.Digest && d.MediaType == ocispec.MediaTypeImageManifest && d.Annotations[ocispec.AnnotationRefName] == sigTag && sigs == 0 {
			if d.Size > MaxManifestSize {
				return ocispec.Descriptor{}, fmt.Errorf("%w: signature manifest %s is %d bytes, more than the %d a manifest may have", ErrCorrupt, d.Digest, d.Size, MaxManifestSize)
			}
			sigs++
			continue
		}
		what := d.Digest.String()
		if ref := d.Annotations[ocispec.AnnotationRefName]; ref != "" {
			what += ", tagged " + strconv.Quote(ref)
		}
		return ocispec.Descriptor{}, fmt.Errorf("%w: index.json entry %d (%s) is neither the package root %s nor its signature: nothing outside the signed root may travel in a package", ErrCorrupt, i+1, what, root.Digest)
	}
	return root, nil
}

// setConfig parses ferry.json; nil data leaves the config unset.
func (r *Reader) setConfig(configData []byte) error {
	if configData == nil {
		return nil
	}
	var cfg Config
	if err := json.Unmarshal(configData, &cfg); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, ConfigFileName, err)
	}
	r.Config, r.ConfigData = &cfg, configData
	return nil
}

// checkEntry refuses entries that are not plain files or folders, or whose
// names could land outside the extraction folder.
func checkEntry(h *tar.Header) error {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink, tar.TypeLink:
		return fmt.Errorf("%w: %q is a link", ErrUnsafeEntry, h.Name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: %q is a device or fifo", ErrUnsafeEntry, h.Name)
	default:
		return fmt.Errorf("%w: %q has unsupported type %q", ErrUnsafeEntry, h.Name, h.Typeflag)
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return fmt.Errorf("%w: %q is a sparse file", ErrUnsafeEntry, h.Name)
		}
	}
	name := h.Name
	if strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%w: %q is an absolute or invalid path", ErrUnsafeEntry, name)
	}
	for _, part := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if part == ".." {
			return fmt.Errorf("%w: %q contains ..", ErrUnsafeEntry, name)
		}
	}
	return nil
}

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
}

func (r *Reader) walk(ctx context.Context, opts walkOptions) (*Summary, error) {
	w := &walker{r: r, walkOptions: opts, sizes: map[digest.Digest]int64{}, kept: map[digest.Digest][]byte{},
		budget: sizeBudget(r.Config, len(r.ConfigData)), buf: make([]byte, copyBufferSize), copyBuf: make([]byte, 256<<10)}
	var err error
	if r.isDir {
		err = w.walkDir(ctx)
	} else {
		err = r.withTar(func(tr *tar.Reader, _ *zstReader) error { return w.walkTar(ctx, tr) })
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path, err)
	}
	if !opts.graph {
		return &Summary{Blobs: w.blobs, Size: w.total}, nil
	}
	sum, err := w.finish()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path, err)
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
// manifest bundles and files.
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
	}
	return b
}

func (w *walker) walkTar(ctx context.Context, tr *tar.Reader) error {
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
			return nil
		}
		if err != nil {
			return err
		}
		if err := checkEntry(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeDir {
			if (h.Name != blobsDir && h.Name != blobsSHA256Dir) || dirs[h.Name] {
				return fmt.Errorf("%w: unexpected entry %q", ErrCorrupt, h.Name)
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
		return "", fmt.Errorf("%w: unexpected entry %q", ErrCorrupt, name)
	}
	d := digest.NewDigestFromEncoded(digest.SHA256, rest)
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("%w: entry %q is not named by a sha256 digest", ErrCorrupt, name)
	}
	return d, nil
}

// blob verifies one blob read from src, handing it to fn on the way. fn's
// reader ends in a *corruptBlobError instead of io.EOF when the bytes do
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
	// Reading (I/O, decompression) and hashing run ahead on other cores
	// while fn works on what was read.
	pr := newPrefetchReader(io.LimitReader(src, desc.Size), w.buf, desc.Digest.Algorithm().Hash())
	defer pr.Close()
	tee := io.TeeReader(&verifyingReader{pr: pr, want: desc.Digest}, writerOrDiscard(keep))
	if w.fn != nil {
		if err := w.fn(desc, tee); err != nil {
			return err
		}
	}
	_, err := io.CopyBuffer(io.Discard, tee, w.copyBuf)
	var ce *corruptBlobError
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: archive is truncated", ErrCorrupt)
	case err != nil:
		return fmt.Errorf("%w: blob %s: %v", ErrCorrupt, desc.Digest, err)
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
		w.progress(Progress{Phase: PhaseRead, Digest: desc.Digest, Bytes: w.total, Blobs: w.blobs})
	}
	return nil
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

// prefetchChunks is how many chunks of its buffer a prefetchReader keeps
// in flight.
const prefetchChunks = 4

// prefetchReader reads src ahead in a second goroutine, into chunks of a
// buffer, so that reading (I/O, decompression) overlaps with the reader's
// own work (hashing, uploading). Given a hash, a third goroutine hashes each
// chunk while the reader uses it: reading, hashing and writing a pulled blob
// then run side by side. Close stops the goroutines; it must be called before
// src or the buffer is used again.
type prefetchReader struct {
	full   chan prefetched
	free   chan *part
	stop   chan struct{}
	cur    []byte // unread part of the current chunk
	held   *part  // the current chunk, released once read
	err    error
	hash   hash.Hash
	hashed chan struct{} // closed when every chunk is hashed
}

// part is a piece of a prefetchReader's buffer; it goes back to free when
// both the reader and the hasher are done with it.
type part struct {
	b    []byte
	refs atomic.Int32
}

type prefetched struct {
	c   *part
	err error
}

// newPrefetchReader reads src ahead into the prefetchChunks chunks of buf;
// if h is not nil, what is read is also fed to h (see sum).
func newPrefetchReader(src io.Reader, buf []byte, h hash.Hash) *prefetchReader {
	size := len(buf) / prefetchChunks
	r := &prefetchReader{
		full: make(chan prefetched, prefetchChunks+1),
		free: make(chan *part, prefetchChunks),
		stop: make(chan struct{}),
		hash: h,
	}
	for i := range prefetchChunks {
		r.free <- &part{b: buf[i*size : (i+1)*size : (i+1)*size]}
	}
	var toHash chan *part
	if h != nil {
		toHash, r.hashed = make(chan *part, prefetchChunks), make(chan struct{})
		go func() {
			defer close(r.hashed)
			for c := range toHash {
				h.Write(c.b)
				r.release(c)
			}
		}()
	}
	go func() {
		defer close(r.full)
		if toHash != nil {
			defer close(toHash)
		}
		for {
			var c *part
			select {
			case c = <-r.free:
			case <-r.stop:
				return
			}
			n, err := chunk.Fill(src, c.b[:cap(c.b)])
			if n > 0 {
				c.b = c.b[:n]
				c.refs.Store(1)
				if toHash != nil {
					c.refs.Store(2)
					toHash <- c
				}
				r.full <- prefetched{c: c}
			}
			if err != nil {
				r.full <- prefetched{err: err}
				return
			}
		}
	}()
	return r
}

func (r *prefetchReader) release(c *part) {
	if c.refs.Add(-1) == 0 {
		r.free <- c
	}
}

func (r *prefetchReader) Read(p []byte) (int, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// fill makes the next chunk current once the current one is read.
func (r *prefetchReader) fill() error {
	for len(r.cur) == 0 {
		if r.err != nil {
			return r.err
		}
		if r.held != nil {
			r.release(r.held)
			r.held = nil
		}
		p, ok := <-r.full
		switch {
		case !ok:
			r.err = io.EOF
		case p.err != nil:
			r.err = p.err
		default:
			r.cur, r.held = p.c.b, p.c
		}
	}
	return nil
}

// chunks hands fn the rest of src chunk by chunk, as read: whole chunks but
// the last, without copying them. It returns nil at the end of src.
func (r *prefetchReader) chunks(fn func([]byte) error) error {
	for {
		if err := r.fill(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		b := r.cur
		r.cur = nil
		if err := fn(b); err != nil {
			return err
		}
	}
}

// sum waits until everything read is hashed and returns the hash (nil
// without one). Call it only after reading to the end.
func (r *prefetchReader) sum() hash.Hash {
	if r.hashed != nil {
		<-r.hashed
	}
	return r.hash
}

// Close stops the read-ahead and waits for it.
func (r *prefetchReader) Close() {
	close(r.stop)
	for range r.full {
	}
	if r.hashed != nil {
		<-r.hashed
	}
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

// walkDir visits a layout folder's graph children-before-parents. Every
// file it opens must be a regular file (see openRegular).
func (w *walker) walkDir(ctx context.Context) error {
	visited := map[digest.Digest]bool{}
	var visit func(d ocispec.Descriptor) error
	visit = func(d ocispec.Descriptor) error {
		if visited[d.Digest] {
			return nil
		}
		visited[d.Digest] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := checkDescriptor(d); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if isContainer(d.MediaType) {
			data, err := w.r.readBlobFile(d)
			if err != nil {
				return err
			}
			kids, err := children(d.MediaType, data)
			if err != nil {
				return fmt.Errorf("%w: blob %s: %v", ErrCorrupt, d.Digest, err)
			}
			for _, k := range kids {
				if err := visit(k); err != nil {
					return err
				}
			}
			return w.blob(d, bytes.NewReader(data))
		}
		f, err := w.r.openBlobFile(d)
		if err != nil {
			return err
		}
		defer f.Close()
		return w.blob(d, f)
	}
	for _, d := range w.r.Index.Manifests {
		if err := visit(d); err != nil {
			return err
		}
	}
	return nil
}

// openRegular opens name, a file of a layout folder, for reading. It must
// be a regular file: a link (even to a regular file: archives refuse links
// too), a device or a FIFO is refused as ErrUnsafeEntry. The file is opened
// without following a link and without blocking, so a FIFO cannot hang the
// reader and a swap after a check cannot fool it.
func openRegular(p, name string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, fmt.Errorf("%w: %q is a link", ErrUnsafeEntry, name)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: %q is not a regular file (%s)", ErrUnsafeEntry, name, fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readRegular reads name, a regular file of a layout folder of at most
// limit bytes, whole.
func readRegular(p, name string, limit int64) ([]byte, error) {
	f, fi, err := openRegular(p, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a package allows", ErrCorrupt, name, fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s grew past %d bytes while read", ErrCorrupt, name, limit)
	}
	return data, nil
}

// openBlobFile opens the layout folder's file of blob d, which must be a
// regular file of d's size.
func (r *Reader) openBlobFile(d ocispec.Descriptor) (*os.File, error) {
	name := blobPath(d.Digest)
	f, fi, err := openRegular(filepath.Join(r.path, filepath.FromSlash(name)), name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: blob %s missing", ErrCorrupt, d.Digest)
	}
	if err != nil {
		return nil, err
	}
	if fi.Size() != d.Size {
		f.Close()
		return nil, fmt.Errorf("%w: blob %s does not match its digest (size)", ErrCorrupt, d.Digest)
	}
	return f, nil
}

// readBlobFile reads a manifest, index or config from the layout folder,
// verified against d.
func (r *Reader) readBlobFile(d ocispec.Descriptor) ([]byte, error) {
	if d.Size > MaxManifestSize {
		return nil, fmt.Errorf("%w: manifest %s is %d bytes, more than the %d a manifest may have", ErrCorrupt, d.Digest, d.Size, MaxManifestSize)
	}
	f, err := r.openBlobFile(d)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, d.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != d.Size || digest.SHA256.FromBytes(data) != d.Digest {
		return nil, fmt.Errorf("%w: blob %s does not match its digest", ErrCorrupt, d.Digest)
	}
	return data, nil
}

// finish checks the graph once every blob has been seen.
func (w *walker) finish() (*Summary, error) {
	sum := &Summary{Blobs: w.blobs, Size: w.total, Nodes: map[digest.Digest]Node{}, json: w.kept, order: w.order}
	reached := map[digest.Digest]bool{}
	var visit func(d ocispec.Descriptor) error
	visit = func(d ocispec.Descriptor) error {
		size, ok := w.sizes[d.Digest]
		if !ok {
			return fmt.Errorf("%w: blob %s missing", ErrCorrupt, d.Digest)
		}
		if size != d.Size {
			return fmt.Errorf("%w: blob %s is %d bytes, its descriptor says %d", ErrCorrupt, d.Digest, size, d.Size)
		}
		if reached[d.Digest] {
			return nil
		}
		reached[d.Digest] = true
		if !isContainer(d.MediaType) {
			return nil
		}
		data, ok := w.kept[d.Digest]
		if !ok {
			return fmt.Errorf("%w: manifest %s is not a JSON manifest or index", ErrCorrupt, d.Digest)
		}
		sum.Nodes[d.Digest] = Node{Descriptor: d, Data: data}
		kids, err := children(d.MediaType, data)
		if err != nil {
			return fmt.Errorf("%w: blob %s: %v", ErrCorrupt, d.Digest, err)
		}
		for _, k := range kids {
			if err := checkDescriptor(k); err != nil {
				return fmt.Errorf("%w: blob %s: %v", ErrCorrupt, d.Digest, err)
			}
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range w.r.Index.Manifests {
		if err := visit(d); err != nil {
			return nil, err
		}
	}
	for d := range w.sizes {
		if !reached[d] {
			return nil, fmt.Errorf("%w: blob %s is not referenced by the package", ErrCorrupt, d)
		}
	}
	for _, d := range signatureEntries(w.r.Root.Digest, w.r.Index.Manifests) {
		err := checkSignatureManifest(w.r.Root.Digest, sum.Nodes[d.Digest].Data, func(l ocispec.Descriptor) ([]byte, error) {
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
	rootNode := sum.Nodes[w.r.Root.Digest]
	var root ocispec.Index
	if err := json.Unmarshal(rootNode.Data, &root); err != nil || w.r.Root.MediaType != ocispec.MediaTypeImageIndex {
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
	if digest.SHA256.FromBytes(w.r.ConfigData) != pm.Config.Digest {
		return nil, fmt.Errorf("%w: %s differs from the package config blob %s", ErrCorrupt, ConfigFileName, pm.Config.Digest)
	}
	return sum, nil
}

// openDir reads a layout folder's oci-layout and index.json, and ferry.json
// when present (it is checked against the config blob by Walk). Each must
// be a regular file of at most MaxManifestSize bytes, and blobs/ and
// blobs/sha256/ folders, not links.
func (r *Reader) openDir() error {
	head := func(name string, required error) ([]byte, error) {
		data, err := readRegular(filepath.Join(r.path, name), name, MaxManifestSize)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, required
		}
		return data, err
	}
	layout, err := head(layoutFileName, fmt.Errorf("%w: no oci-layout file", ErrNotPackage))
	if err != nil {
		return err
	}
	index, err := head(indexFileName, fmt.Errorf("%w: no index.json", ErrNotPackage))
	if err != nil {
		return err
	}
	cfg, err := head(ConfigFileName, nil)
	if err != nil {
		return err
	}
	for _, dir := range []string{blobsDir, blobsSHA256Dir} {
		fi, err := os.Lstat(filepath.Join(r.path, filepath.FromSlash(dir)))
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("%w: %q is not a folder", ErrUnsafeEntry, strings.TrimSuffix(dir, "/"))
		}
	}
	if err := r.setHead(cfg, layout, index); err != nil {
		return err
	}
	if r.Config == nil {
		// Read the config through the graph: root → package manifest → config.
		return r.configFromGraph()
	}
	return nil
}

func (r *Reader) configFromGraph() error {
	data, err := r.readBlobFile(r.Root)
	if err != nil {
		return err
	}
	var root ocispec.Index
	if err := json.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("%w: root: %v", ErrCorrupt, err)
	}
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] != KindPackage {
			continue
		}
		mdata, err := r.readBlobFile(m)
		if err != nil {
			return err
		}
		var pm ocispec.Manifest
		if err := json.Unmarshal(mdata, &pm); err != nil {
			return fmt.Errorf("%w: package manifest: %v", ErrCorrupt, err)
		}
		cdata, err := r.readBlobFile(pm.Config)
		if err != nil {
			return err
		}
		return r.setConfig(cdata)
	}
	return fmt.Errorf("%w: the package root has no package manifest", ErrCorrupt)
}
