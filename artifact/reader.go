package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/ferrypkg/ferry/artifact/internal/zstdframe"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Errors a reader reports; match them with errors.Is.
var (
	// ErrNotPackage means the input is not a ferry package.
	ErrNotPackage = errors.New("not a ferry package")
	// ErrCorrupt means the package is damaged or tampered with.
	ErrCorrupt = corrupt.Err
	// ErrUnsafeEntry means an archive entry could escape its folder or is not a plain file.
	ErrUnsafeEntry = errors.New("unsafe archive entry")
)

// Reader reads a package from an archive (.tar or .tar.zst) or an OCI
// layout folder. Open reads only the head; Walk streams and verifies the rest.
type Reader struct {
	path string
	// name is what messages call the package (Open: its path).
	name   string
	isDir  bool
	format Format // of an archive: tar or tar.zst, as read
	// config is ferry.json, configData its exact bytes.
	config     *Config
	configData []byte
	// index is the layout's index.json; root the package root it names.
	index ocispec.Index
	root  ocispec.Descriptor
	// head is the digest of the head (ferry.json, oci-layout, index.json)
	// as Open read it: a later walk refuses an archive whose head changed,
	// so what was verified is what is pushed.
	head digest.Digest
	// oneFrame is set for a .tar.zst that is one zstd frame: it can only be
	// read from its start by decompressing all of it.
	oneFrame bool
	// list is an archive's blobs for Exists and Fetch, made once and
	// shared by the Reader's copies.
	list *blobList
	// pending holds the blobs pushed into an archive until Tag writes it
	// again (write.go), shared by the Reader's copies.
	pending *pendingBlobs
	// parts is set for an archive split into parts (parts.go): path is
	// then its index.
	parts *partSet
	// delta is set for a delta: ferry-delta.json, as Open read it (delta.go).
	delta *deltaHead
}

// blobList is an archive's blobs and their sizes, listed once.
type blobList struct {
	once  sync.Once
	sizes map[digest.Digest]int64
	err   error
}

// Open opens a package archive or layout folder and reads its head:
// ferry.json and index.json. Nothing is verified against digests until Walk.
// A package split into parts (Split) is opened by its index, any of its
// parts, or its archive's name when no archive of that name exists
// (PartsIndexPath), and read from its parts in place.
func Open(ctx context.Context, p string) (*Reader, error) {
	return OpenAs(ctx, p, p)
}

// OpenAs is Open, the package called name in every message instead of p:
// a server that spooled an upload to a temporary file names the user's
// archive, not its own file.
func OpenAs(ctx context.Context, p, name string) (*Reader, error) {
	if idx := PartsIndexPath(p); idx != "" {
		return openSplit(ctx, idx, name)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, errors.Unwrap(err))
	}
	r := &Reader{path: p, name: name, isDir: fi.IsDir(), list: &blobList{}, pending: &pendingBlobs{}}
	if r.isDir {
		err = r.openDir()
	} else {
		err = r.openArchive()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// openSplit opens the split package whose index is at idx: every part
// must be there at its size, the head read from them must name the root
// the index records, and the parts must add up to no more than an archive
// of that package can take.
func openSplit(ctx context.Context, idx, name string) (*Reader, error) {
	s, err := openParts(idx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r := &Reader{path: idx, name: name, list: &blobList{}, pending: &pendingBlobs{}, parts: s}
	err = r.openArchive()
	if err == nil {
		err = s.bound(r.config, len(r.configData))
	}
	if err == nil && r.root.Digest != s.ps.Root {
		err = fmt.Errorf("%w: the parts hold the package %s, %s records %s", ErrCorrupt, r.root.Digest, filepath.Base(idx), s.ps.Root)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, s.damaged(ctx, err))
	}
	return r, nil
}

// Path is where the package was opened from.
func (r *Reader) Path() string { return r.path }

// Config is the package's ferry.json, as Open read it. It is the reader's:
// do not change it.
func (r *Reader) Config() *Config { return r.config }

// ConfigData is ferry.json's exact bytes.
func (r *Reader) ConfigData() []byte { return bytes.Clone(r.configData) }

// Index is the package's index.json: the root and at most its signature.
func (r *Reader) Index() ocispec.Index {
	idx := r.index
	idx.Manifests = slices.Clone(r.index.Manifests)
	return idx
}

// Root is the package root: the descriptor of its root index.
func (r *Reader) Root() ocispec.Descriptor { return r.root }

// openArchive reads the three leading entries of an archive. A .tar.zst
// whose ferry.json accounts for more than MaxExpansion times its size is
// refused there: a real package's blobs compress less than that, a zstd
// bomb's much more.
func (r *Reader) openArchive() error {
	var size int64
	err := r.withTar(func(a *archiveStream) error {
		tr, z := a.tr, a.z
		if _, err := r.readHead(tr); err != nil {
			return err
		}
		r.format = FormatTar
		if z != nil {
			r.format, size = FormatTarZstd, z.Size
			// A frame still being decoded that ends at the end of the file:
			// the archive is one zstd frame (zstd or tar --zstd made it).
			r.oneFrame = z.Decoding && z.Next == z.Size
		}
		return r.readDelta(tr)
	})
	if err != nil {
		return err
	}
	if claimed := claimedSize(r.config) - r.delta.omittedSize(); r.format == FormatTarZstd && claimed > zstdframe.ExpansionFloor+MaxExpansion*size {
		return fmt.Errorf("%w: %s accounts for %d bytes of blobs, more than %d times the archive's %d bytes (a zstd bomb?)", ErrCorrupt, ConfigFileName, claimed, MaxExpansion, size)
	}
	return nil
}

// withTar opens the archive, which must be a regular file, undoing zstd
// when present, and hands it to fn. It writes nothing into r: parallel
// walks share it. Both streams can Seek forward, so archive/tar skips the
// data of entries fn leaves unread without reading it (a .tar.zst's raw
// frames; see zstReader).
func (r *Reader) withTar(fn func(*archiveStream) error) error {
	f, size, err := r.openArchiveFile()
	if err != nil {
		return err
	}
	defer f.Close()
	a := &archiveStream{f: f, size: size}
	var magic [4]byte
	_, _ = f.ReadAt(magic[:], 0)
	var src io.Reader = f
	if zstdframe.IsZstd(magic[:]) {
		if a.z, err = zstdframe.NewReader(f, size); err != nil {
			return err
		}
		defer a.z.Close()
		src = a.z
	}
	a.tr = tar.NewReader(src)
	return fn(a)
}

// archiveStream is an archive opened for reading: its tar entries (tr),
// and under them the zstd reader (z, nil for a plain tar) and the file.
type archiveStream struct {
	tr   *tar.Reader
	z    *zstdframe.Reader
	f    archiveFile
	size int64
}

// end checks what follows the tar's end marker, which tr has just read: at
// most MaxTarPadding bytes, all zeros (tar pads its last record), then the
// end of the file — of a .tar.zst, the end of its last frame, with no
// skippable frame after the marker. Anything else is no part of the
// package, yet would travel with it; it is refused, and never read past
// MaxTarPadding bytes (a file of a terabyte after the marker is refused at
// once).
func (a *archiveStream) end() error {
	var src io.Reader = a.f
	var left int64 // file bytes after what is being read
	skippable := 0
	if a.z != nil {
		src, left, skippable = a.z, a.z.Rest(), a.z.Skippable
	} else {
		pos, err := a.f.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		left = a.size - pos
	}
	if left > MaxTarPadding {
		return fmt.Errorf("%w: %d bytes follow the archive's end", ErrCorrupt, left)
	}
	n, err := io.CopyN(zeroWriter{}, src, MaxTarPadding+1)
	switch {
	case errors.Is(err, errNotZero):
		return fmt.Errorf("%w: bytes other than zeros follow the archive's end", ErrCorrupt)
	case a.z != nil && errors.Is(err, ErrCorrupt):
		return fmt.Errorf("%w: bytes other than zstd frames of zeros follow the archive's end", ErrCorrupt)
	case err != nil && err != io.EOF:
		return err
	case n > MaxTarPadding:
		return fmt.Errorf("%w: more than %d bytes follow the archive's end", ErrCorrupt, MaxTarPadding)
	case a.z != nil && a.z.Skippable > skippable:
		return fmt.Errorf("%w: a zstd skippable frame follows the archive's end", ErrCorrupt)
	}
	return nil
}

// errNotZero is zeroWriter's error for a byte that is not zero.
var errNotZero = errors.New("not zero")

// zeroWriter takes zeros only.
type zeroWriter struct{}

func (zeroWriter) Write(p []byte) (int, error) {
	for i, b := range p {
		if b != 0 {
			return i, errNotZero
		}
	}
	return len(p), nil
}

// openArchiveFile opens the archive, one regular file or a split
// archive's parts, and returns its size.
func (r *Reader) openArchiveFile() (archiveFile, int64, error) {
	if r.parts != nil {
		f := r.parts.open()
		return f, f.size, nil
	}
	f, fi, err := openRegular(r.path, r.name)
	if err != nil {
		return nil, 0, err
	}
	return f, fi.Size(), nil
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
		return nil, corruptIn("", err)
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
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, h.Name, err)
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
				return 0, fmt.Errorf("%w: first entry is %.64q, not %s", ErrNotPackage, h.Name, ConfigFileName)
			}
			return 0, fmt.Errorf("%w: entry %d is %.64q, want %s", ErrCorrupt, i+1, h.Name, name)
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
		return corruptIn("index.json", err)
	}
	root, err := checkIndex(idx.Manifests)
	if err != nil {
		return err
	}
	if err := r.setConfig(configData); err != nil {
		return err
	}
	r.index, r.root, r.head = idx, root, head
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
		if err := graph.CheckDescriptor(d); err != nil {
			return ocispec.Descriptor{}, corruptIn("index.json", err)
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
		return ocispec.Descriptor{}, fmt.Errorf("%w: the package root %s is a %.64q, not an image index", ErrCorrupt, root.Digest, root.MediaType)
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
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, ConfigFileName, err)
	}
	r.config, r.configData = &cfg, configData
	return nil
}

// checkEntry refuses entries that are not plain files or folders, or whose
// names could land outside the extraction folder.
func checkEntry(h *tar.Header) error {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink, tar.TypeLink:
		return fmt.Errorf("%w: %.64q is a link", ErrUnsafeEntry, h.Name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: %.64q is a device or fifo", ErrUnsafeEntry, h.Name)
	default:
		return fmt.Errorf("%w: %.64q has unsupported type %q", ErrUnsafeEntry, h.Name, h.Typeflag)
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return fmt.Errorf("%w: %.64q is a sparse file", ErrUnsafeEntry, h.Name)
		}
	}
	name := h.Name
	if strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%w: %.64q is an absolute or invalid path", ErrUnsafeEntry, name)
	}
	for _, part := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if part == ".." {
			return fmt.Errorf("%w: %.64q contains ..", ErrUnsafeEntry, name)
		}
	}
	return nil
}

// corruptIn wraps err, a failure reading what, in ErrCorrupt, once (see
// corrupt.In).
func corruptIn(what string, err error) error { return corrupt.In(what, err) }
