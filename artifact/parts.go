package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
)

// A package archive can travel as parts: byte ranges of the archive file,
// each on its own medium, named PKG.part001, PKG.part002, … beside an
// index PKG.parts.json that lists each part's name, size and sha256 and
// the package root. Every reader reads the parts in place, through one
// io.ReaderAt over the files, never joined on disk.
//
// The index is not trusted: what is read from the parts is verified as an
// archive is (the head names the root the index records, every blob its
// digest, the graph, the signatures over the root). The parts' digests
// serve to name the part to fetch again: when a read finds damage, each
// part is hashed and the first that differs from the index is named.

// Parts naming and limits.
const (
	// PartsIndexSuffix ends the name of a parts index: PKG.parts.json.
	PartsIndexSuffix = ".parts.json"
	// MediaTypeParts is the media type a parts index records.
	MediaTypeParts = "application/vnd.ferry.package.parts.v1+json"
	// MaxParts bounds the parts of one package (10,000).
	MaxParts = 10_000
	// MinPartSize is the smallest part Split writes (1 MiB).
	MinPartSize = 1 << 20
)

// Parts is a parts index: how a package archive was split.
type Parts struct {
	MediaType string `json:"mediaType"`
	// Package is the archive's file name (PKG), which the parts' names extend.
	Package string `json:"package"`
	// Root is the package root's digest; the head read from the parts must
	// name it.
	Root digest.Digest `json:"root"`
	// Size is the archive's size, PartSize that of every part but the last.
	Size     int64 `json:"size"`
	PartSize int64 `json:"partSize"`
	// Parts lists the parts in order.
	Parts []Part `json:"parts"`
}

// Part is one part of a split archive: its file name (beside the index),
// size and sha256.
type Part struct {
	Name   string        `json:"name"`
	Size   int64         `json:"size"`
	Digest digest.Digest `json:"digest"`
}

// PartError names a part of a split package that is missing, of the wrong
// size, or damaged: the one medium to fetch again. It wraps ErrCorrupt.
type PartError struct {
	// Part is the part's path, Index the index's.
	Part, Index string
	// Problem says what is wrong with the part.
	Problem string
	// Err is what the read found, if the damage was found by a read.
	Err error
}

func (e *PartError) Error() string {
	msg := fmt.Sprintf("part %s %s: fetch it again", e.Part, e.Problem)
	if e.Err != nil {
		msg += " (the read found: " + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap gives ErrCorrupt and the read's error.
func (e *PartError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrCorrupt}
	}
	return []error{ErrCorrupt, e.Err}
}

var partNameRE = regexp.MustCompile(`\.part[0-9]{3,}$`)

// partName is the name of part i (from 0) of base.
func partName(base string, i int) string { return fmt.Sprintf("%s.part%03d", base, i+1) }

// PartsIndexPath returns the index of the split package p names, or "":
// p may be the index itself (PKG.parts.json), any of its parts
// (PKG.part001), or PKG when no file PKG exists but PKG.parts.json does.
func PartsIndexPath(p string) string {
	switch {
	case strings.HasSuffix(p, PartsIndexSuffix):
		return p
	case partNameRE.MatchString(p):
		return partNameRE.ReplaceAllString(p, "") + PartsIndexSuffix
	}
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if _, err := os.Lstat(p + PartsIndexSuffix); err == nil {
		return p + PartsIndexSuffix
	}
	return ""
}

// readParts reads and checks the parts index at p.
func readParts(p string) (*Parts, error) {
	data, err := readRegular(p, p, MaxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the parts index %s is missing: copy it from any medium of the package (%w)", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	var ps Parts
	if err := json.Unmarshal(data, &ps); err != nil {
		return nil, fmt.Errorf("%w: parts index: %w", ErrCorrupt, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: parts index: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	switch {
	case ps.MediaType != MediaTypeParts:
		return nil, bad("media type %q, not %s", ps.MediaType, MediaTypeParts)
	case ps.Package == "" || ps.Package != filepath.Base(ps.Package) || strings.ContainsAny(ps.Package, `/\`) || ps.Package == "." || ps.Package == "..":
		return nil, bad("package %q is not a file name", ps.Package)
	case ps.Root.Validate() != nil:
		return nil, bad("root %q is not a digest", ps.Root)
	case len(ps.Parts) == 0 || len(ps.Parts) > MaxParts:
		return nil, bad("%d parts (1 to %d)", len(ps.Parts), MaxParts)
	case ps.PartSize <= 0 || ps.PartSize > sizeCeiling/MaxParts:
		return nil, bad("part size %d out of range", ps.PartSize)
	}
	var total int64
	for i, pt := range ps.Parts {
		switch {
		case pt.Name != partName(ps.Package, i):
			return nil, bad("part %d is %q, not %s", i+1, pt.Name, partName(ps.Package, i))
		case pt.Size <= 0 || pt.Size > ps.PartSize || (i < len(ps.Parts)-1 && pt.Size != ps.PartSize):
			return nil, bad("part %s is %d bytes; parts are %d bytes, the last at most that", pt.Name, pt.Size, ps.PartSize)
		case pt.Digest.Algorithm() != digest.SHA256 || pt.Digest.Validate() != nil:
			return nil, bad("part %s has no sha256 digest", pt.Name)
		}
		total += pt.Size
	}
	if total != ps.Size {
		return nil, bad("its parts add up to %d bytes, not the %d it records", total, ps.Size)
	}
	return &ps, nil
}

// partSet is an opened split package, shared by a Reader's copies.
type partSet struct {
	index string // the index's path
	dir   string
	ps    *Parts
	offs  []int64 // where each part starts in the archive

	mu   sync.Mutex
	diag *PartError // the damaged part a diagnosis found, once
	done bool
}

// openParts reads the index at p and checks that every part is there, a
// regular file of the size the index records.
func openParts(p string) (*partSet, error) {
	ps, err := readParts(p)
	if err != nil {
		return nil, err
	}
	return newPartSet(p, ps)
}

// newPartSet checks the parts ps lists, beside the index at p.
func newPartSet(p string, ps *Parts) (*partSet, error) {
	s := &partSet{index: p, dir: filepath.Dir(p), ps: ps, offs: make([]int64, len(ps.Parts))}
	var off int64
	for i, pt := range ps.Parts {
		s.offs[i] = off
		off += pt.Size
		f, err := s.openPart(i)
		if err != nil {
			return nil, err
		}
		f.Close()
	}
	return s, nil
}

// path is part i's path.
func (s *partSet) path(i int) string { return filepath.Join(s.dir, s.ps.Parts[i].Name) }

// openPart opens part i, which must be a regular file of its size.
func (s *partSet) openPart(i int) (*os.File, error) {
	pt := s.ps.Parts[i]
	f, fi, err := openRegular(s.path(i), s.path(i))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &PartError{Part: s.path(i), Index: s.index, Problem: fmt.Sprintf("is missing (part %d of %d)", i+1, len(s.ps.Parts))}
	case err != nil:
		return nil, err
	case fi.Size() != pt.Size:
		f.Close()
		return nil, &PartError{Part: s.path(i), Index: s.index, Problem: fmt.Sprintf("is %d bytes, %s records %d (part %d of %d)", fi.Size(), filepath.Base(s.index), pt.Size, i+1, len(s.ps.Parts))}
	}
	return f, nil
}

// damaged names the part that explains err, a read's failure, if any part
// differs from the index: each part is hashed (once per partSet) and the
// first whose sha256 is not the index's is named. Otherwise err is
// returned as it is: the package was damaged before it was split.
func (s *partSet) damaged(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !(errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotPackage) || errors.Is(err, ErrUnsafeEntry) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return err
	}
	var pe *PartError
	if errors.As(err, &pe) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.diag = s.hashParts(ctx)
		s.done = ctx.Err() == nil
	}
	if s.diag == nil {
		return err
	}
	d := *s.diag
	d.Err = err
	return &d
}

// hashParts returns the first part that is missing, resized or whose
// sha256 is not the index's.
func (s *partSet) hashParts(ctx context.Context) *PartError {
	buf := make([]byte, copyBufferSize)
	for i, pt := range s.ps.Parts {
		f, err := s.openPart(i)
		if err != nil {
			var pe *PartError
			if errors.As(err, &pe) {
				return pe
			}
			return &PartError{Part: s.path(i), Index: s.index, Problem: "cannot be read: " + err.Error()}
		}
		h := sha256.New()
		_, err = io.CopyBuffer(h, &ctxReader{ctx: ctx, r: f}, buf)
		f.Close()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return &PartError{Part: s.path(i), Index: s.index, Problem: "cannot be read: " + err.Error()}
		}
		if got := digest.NewDigest(digest.SHA256, h); got != pt.Digest {
			return s.damagedPart(i, got)
		}
	}
	return nil
}

// damagedPart is the error for part i, whose sha256 is got.
func (s *partSet) damagedPart(i int, got digest.Digest) *PartError {
	return &PartError{Part: s.path(i), Index: s.index, Problem: fmt.Sprintf("is damaged: its sha256 is %s…, %s records %s… (part %d of %d)",
		got.Encoded()[:12], filepath.Base(s.index), s.ps.Parts[i].Digest.Encoded()[:12], i+1, len(s.ps.Parts))}
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// archiveFile is an archive opened for reading: one file, or the parts of
// a split one.
type archiveFile interface {
	io.ReaderAt
	io.ReadSeeker
	io.Closer
}

// open returns the parts as one file.
func (s *partSet) open() *partsFile {
	return &partsFile{s: s, size: s.ps.Size}
}

// partsFile reads a split archive's parts as one file. Parts are opened
// as reads reach them, at most two at a time.
type partsFile struct {
	s    *partSet
	size int64
	pos  int64

	mu    sync.Mutex
	open  [2]*os.File
	which [2]int // the part each open file is; LRU: open[0] most recent
}

var _ archiveFile = (*partsFile)(nil)

// file returns part i, opened.
func (f *partsFile) file(i int) (*os.File, error) {
	for k := range f.open {
		if f.open[k] != nil && f.which[k] == i {
			if k == 1 {
				f.open[0], f.open[1] = f.open[1], f.open[0]
				f.which[0], f.which[1] = f.which[1], f.which[0]
			}
			return f.open[0], nil
		}
	}
	fh, err := f.s.openPart(i)
	if err != nil {
		return nil, err
	}
	if f.open[1] != nil {
		f.open[1].Close()
	}
	f.open[1], f.which[1] = f.open[0], f.which[0]
	f.open[0], f.which[0] = fh, i
	return fh, nil
}

// ReadAt reads across parts.
func (f *partsFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("parts: negative offset")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for len(p) > 0 {
		if off >= f.size {
			return n, io.EOF
		}
		i := sort.Search(len(f.s.offs), func(i int) bool { return f.s.offs[i] > off }) - 1
		fh, err := f.file(i)
		if err != nil {
			return n, err
		}
		start := f.s.offs[i]
		want := min(int64(len(p)), start+f.s.ps.Parts[i].Size-off)
		k, err := fh.ReadAt(p[:want], off-start)
		n, off, p = n+k, off+int64(k), p[k:]
		if int64(k) < want {
			if err == nil || errors.Is(err, io.EOF) {
				err = &PartError{Part: f.s.path(i), Index: f.s.index, Problem: "is shorter than the index records: it changed while read"}
			}
			return n, err
		}
	}
	return n, nil
}

// Read reads at the current position.
func (f *partsFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek moves the position.
func (f *partsFile) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.pos
	case io.SeekEnd:
		offset += f.size
	default:
		return f.pos, errors.New("parts: bad whence")
	}
	if offset < 0 {
		return f.pos, errors.New("parts: negative position")
	}
	f.pos = offset
	return offset, nil
}

// Close closes the open parts.
func (f *partsFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, fh := range f.open {
		if fh != nil {
			fh.Close()
			f.open[k] = nil
		}
	}
	return nil
}

// SplitOptions configures Split.
type SplitOptions struct {
	// PartSize is the size of every part but the last; at least
	// MinPartSize. Required.
	PartSize int64
	// Base is the path the parts extend (Base.part001, …, Base.parts.json);
	// the default is the package's path (of a split package, its archive's
	// path: the index's without .parts.json).
	Base string
}

// Split writes the package archive at src (or the parts of a split one)
// as parts of opts.PartSize bytes, the last smaller, and their index.
// Nothing is joined on disk or read twice; nothing is verified but the
// head (a reader of the parts verifies every blob). The parts are written
// under temporary names and renamed into place only once all are written;
// parts of an earlier split into more parts are then removed, so no stale
// part stays behind. A layout folder is refused: create its archive first.
func Split(ctx context.Context, src string, opts SplitOptions) (*Parts, error) {
	if opts.PartSize < MinPartSize {
		return nil, fmt.Errorf("split %s: parts must be at least %d bytes, not %d", src, MinPartSize, opts.PartSize)
	}
	r, err := Open(ctx, src)
	if err != nil {
		return nil, err
	}
	if r.isDir {
		return nil, fmt.Errorf("split %s: a layout folder; create an archive of it first", src)
	}
	base := opts.Base
	if base == "" {
		base = r.path
		if r.parts != nil {
			base = strings.TrimSuffix(r.parts.index, PartsIndexSuffix)
		}
	}
	f, size, err := r.openArchiveFile()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	defer f.Close()
	if size/opts.PartSize >= MaxParts {
		return nil, fmt.Errorf("split %s: %d-byte parts would make more than %d parts of its %d bytes", src, opts.PartSize, MaxParts, size)
	}
	ps, err := writeParts(base, opts.PartSize, r.root.Digest, func(w io.Writer) error {
		_, err := io.CopyBuffer(w, &ctxReader{ctx: ctx, r: f}, make([]byte, copyBufferSize))
		return err
	})
	if err != nil {
		return nil, r.damaged(ctx, fmt.Errorf("split %s: %w", src, err))
	}
	return ps, nil
}

// damaged names the damaged part behind err, for a split package.
func (r *Reader) damaged(ctx context.Context, err error) error {
	if r.parts == nil {
		return err
	}
	return r.parts.damaged(ctx, err)
}

// writeArchiveFile writes the archive again through write: one file,
// atomically, or parts of the size they had.
func (r *Reader) writeArchiveFile(write func(io.Writer) error) error {
	if r.parts == nil {
		_, err := writeFileAtomic(r.path, write)
		return err
	}
	ps, err := writeParts(strings.TrimSuffix(r.parts.index, PartsIndexSuffix), r.parts.ps.PartSize, r.root.Digest, write)
	if err != nil {
		return err
	}
	s, err := newPartSet(r.parts.index, ps)
	if err != nil {
		return err
	}
	r.parts = s
	return nil
}

// writeParts writes what write writes as parts of base, partSize bytes
// each, and their index, recording root. All are written under temporary
// names and renamed at the end, the index last; the parts of an earlier
// split of base that the new one does not have are then removed.
func writeParts(base string, partSize int64, root digest.Digest, write func(io.Writer) error) (ps *Parts, err error) {
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return nil, err
	}
	// Temporary files of a split of base that was killed.
	for _, pattern := range []string{".part*.tmp-*", PartsIndexSuffix + ".tmp-*"} {
		stale, _ := filepath.Glob(filepath.Join(filepath.Dir(base), "."+globEscape(filepath.Base(base))+pattern))
		for _, f := range stale {
			os.Remove(f)
		}
	}
	pw := &partWriter{base: base, size: partSize}
	defer func() {
		if err != nil {
			pw.abort()
		}
	}()
	if err := write(pw); err != nil {
		return nil, err
	}
	if err := pw.finish(); err != nil {
		return nil, err
	}
	if len(pw.parts) == 0 {
		return nil, errors.New("nothing to split")
	}
	ps = &Parts{MediaType: MediaTypeParts, Package: filepath.Base(base), Root: root, Size: pw.total, PartSize: partSize, Parts: pw.parts}
	data, err := json.MarshalIndent(ps, "", "  ")
	if err != nil {
		return nil, err
	}
	idx, err := os.CreateTemp(filepath.Dir(base), "."+filepath.Base(base)+PartsIndexSuffix+".tmp-*")
	if err != nil {
		return nil, err
	}
	pw.temps = append(pw.temps, idx.Name())
	_, err = idx.Write(append(data, '\n'))
	if cerr := idx.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	// No index names a half-renamed set: the old one goes first, the new
	// one comes last.
	if err := os.Remove(base + PartsIndexSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for i, pt := range ps.Parts {
		if err := os.Rename(pw.temps[i], filepath.Join(filepath.Dir(base), pt.Name)); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(idx.Name(), base+PartsIndexSuffix); err != nil {
		return nil, err
	}
	pw.temps = nil
	return ps, removeStaleParts(base, len(ps.Parts))
}

// removeStaleParts removes base's parts numbered past n, which an earlier
// split into more parts left.
func removeStaleParts(base string, n int) error {
	matches, err := filepath.Glob(globEscape(base) + ".part*")
	if err != nil {
		return err
	}
	for _, m := range matches {
		num, ok := strings.CutPrefix(m, base+".part")
		if !ok || len(num) < 3 || strings.Trim(num, "0123456789") != "" {
			continue
		}
		if k, err := strconv.Atoi(num); err == nil && k <= n && partName(base, k-1) == m {
			continue
		}
		if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// globEscape escapes the pattern characters of a path for filepath.Glob.
func globEscape(p string) string {
	var b strings.Builder
	for _, c := range p {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// partWriter writes a stream as temporary part files of size bytes each,
// hashing each as it goes.
type partWriter struct {
	base  string
	size  int64
	total int64
	parts []Part
	temps []string // temporary files, parts first

	f    *os.File
	h    hashWriter
	left int64 // bytes the current part still takes
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (w *partWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.f == nil {
			if len(w.parts) >= MaxParts {
				return n, fmt.Errorf("more than %d parts", MaxParts)
			}
			name := partName(w.base, len(w.parts))
			f, err := os.CreateTemp(filepath.Dir(w.base), "."+filepath.Base(name)+".tmp-*")
			if err != nil {
				return n, fmt.Errorf("write %s: %w", name, pathCause(err))
			}
			w.f, w.h, w.left = f, sha256.New(), w.size
			w.temps = append(w.temps, f.Name())
			w.parts = append(w.parts, Part{Name: filepath.Base(partName(w.base, len(w.parts)))})
		}
		chunk := p[:min(int64(len(p)), w.left)]
		k, err := w.f.Write(chunk)
		w.h.Write(chunk[:k])
		n, p, w.left, w.total = n+k, p[k:], w.left-int64(k), w.total+int64(k)
		if err != nil {
			// A full medium names the part, not its temporary file.
			return n, fmt.Errorf("write %s: %w", partName(w.base, len(w.parts)-1), pathCause(err))
		}
		if w.left == 0 {
			if err := w.close(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// pathCause is a PathError's cause (its path is a temporary file's), or err.
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// close ends the current part.
func (w *partWriter) close() error {
	pt := &w.parts[len(w.parts)-1]
	pt.Size = w.size - w.left
	pt.Digest = digest.NewDigestFromBytes(digest.SHA256, w.h.Sum(nil))
	err := w.f.Close()
	w.f = nil
	return err
}

// finish ends the last part.
func (w *partWriter) finish() error {
	if w.f == nil {
		return nil
	}
	return w.close()
}

// abort removes every temporary file.
func (w *partWriter) abort() {
	if w.f != nil {
		w.f.Close()
	}
	for _, t := range w.temps {
		os.Remove(t)
	}
}

// ReadParts reads and checks the parts index at p (PartsIndexPath), without
// opening the parts.
func ReadParts(p string) (*Parts, error) {
	ps, err := readParts(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return ps, nil
}

// Parts returns the parts the package was opened from, or nil when it is
// not split.
func (r *Reader) Parts() *Parts {
	if r.parts == nil {
		return nil
	}
	ps := *r.parts.ps
	ps.Parts = append([]Part(nil), ps.Parts...)
	return &ps
}

// OpenArchive returns the archive's bytes as one stream, and their number,
// for a caller that sends the archive whole (an upload): one file, or a
// split package's parts one after the other, each checked against the
// sha256 its index records as its last byte is read — a damaged part ends
// the stream with a PartError naming it. A layout folder has no archive.
func (r *Reader) OpenArchive() (io.ReadCloser, int64, error) {
	if r.isDir {
		return nil, 0, fmt.Errorf("%s: a layout folder, not an archive", r.name)
	}
	f, size, err := r.openArchiveFile()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", r.name, err)
	}
	if r.parts == nil {
		return f, size, nil
	}
	return &partsStream{f: f.(*partsFile), h: sha256.New()}, size, nil
}

// partsStream reads a split archive's parts in order, hashing each.
type partsStream struct {
	f    *partsFile
	h    hashWriter
	i    int   // the part being read
	read int64 // its bytes read
}

func (s *partsStream) Read(p []byte) (int, error) {
	ps := s.f.s.ps
	if s.i >= len(ps.Parts) {
		return 0, io.EOF
	}
	pt := ps.Parts[s.i]
	p = p[:min(int64(len(p)), pt.Size-s.read)]
	n, err := s.f.ReadAt(p, s.f.s.offs[s.i]+s.read)
	s.h.Write(p[:n])
	s.read += int64(n)
	if err == io.EOF {
		err = nil
	}
	if err != nil {
		return n, err
	}
	if s.read == pt.Size {
		if got := digest.NewDigestFromBytes(digest.SHA256, s.h.Sum(nil)); got != pt.Digest {
			return n, s.f.s.damagedPart(s.i, got)
		}
		s.i, s.read = s.i+1, 0
		s.h = sha256.New()
	}
	return n, nil
}

func (s *partsStream) Close() error { return s.f.Close() }
