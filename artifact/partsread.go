package artifact

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
)

// partSet is an opened split package, shared by a Reader's copies.
type partSet struct {
	index string // the index's path
	dir   string
	ps    *Parts
	offs  []int64 // where each part starts in the archive

	// reached is how far into the archive any read of the parts got: a
	// part past it cannot explain a read's failure.
	reached atomic.Int64
	// limit is the most bytes a diagnosis hashes: what the package's head
	// accounts for (bound), or, before the head is read, what a head may
	// take.
	limit int64

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
	s := &partSet{index: p, dir: filepath.Dir(p), ps: ps, offs: make([]int64, len(ps.Parts)), limit: headSizeLimit}
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

// bound holds the parts to the package their head describes (ferry.json,
// of n bytes): its archive takes at most archiveSizeLimit bytes, so a part
// ending past that is refused by its size, before anything is hashed, and a
// diagnosis hashes at most that many bytes. It is called before the set
// is shared.
func (s *partSet) bound(cfg *Config, n int) error {
	s.limit = archiveSizeLimit(cfg, n)
	if s.ps.Size <= s.limit {
		return nil
	}
	i := sort.Search(len(s.offs), func(i int) bool { return s.offs[i]+s.ps.Parts[i].Size > s.limit })
	return &PartError{Part: s.path(i), Index: s.index, Problem: fmt.Sprintf("ends at byte %d of the archive, past the %d bytes its package can take (what its %s accounts for; part %d of %d)",
		s.offs[i]+s.ps.Parts[i].Size, s.limit, ConfigFileName, i+1, len(s.ps.Parts))}
}

// reach records that a read got to byte end of the archive.
func (s *partSet) reach(end int64) {
	for {
		r := s.reached.Load()
		if end <= r || s.reached.CompareAndSwap(r, end) {
			return
		}
	}
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
// differs from the index: the parts the reads reached are hashed, in
// order, at most s.limit bytes of them (once per partSet), and the first
// whose sha256 is not the index's is named. Otherwise err is returned as it
// is: the package was damaged before it was split.
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
// sha256 is not the index's, among those reads reached. Past s.limit bytes
// it hashes nothing more and names the part where the reads stopped:
// larger than its package can be, it is the damaged one.
func (s *partSet) hashParts(ctx context.Context) *PartError {
	buf := make([]byte, copyBufferSize)
	reached := s.reached.Load()
	var hashed int64
	for i, pt := range s.ps.Parts {
		if i > 0 && s.offs[i] >= reached {
			return nil // no read got here
		}
		if hashed+pt.Size > s.limit {
			k := sort.Search(len(s.offs), func(k int) bool { return s.offs[k] >= reached }) - 1
			k = max(k, i)
			return &PartError{Part: s.path(k), Index: s.index, Problem: fmt.Sprintf("is where the read failed, at its byte %d (%d bytes, too large to hash; part %d of %d)",
				max(reached-s.offs[k]-1, 0), s.ps.Parts[k].Size, k+1, len(s.ps.Parts))}
		}
		hashed += pt.Size
		f, err := s.openPart(i)
		if err != nil {
			var pe *PartError
			if errors.As(err, &pe) {
				return pe
			}
			return &PartError{Part: s.path(i), Index: s.index, Problem: "cannot be read: " + err.Error()}
		}
		h := sha256.New()
		_, err = io.CopyBuffer(h, &ctxReader{ctx: ctx, r: io.LimitReader(f, pt.Size)}, buf)
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
		f.s.reach(off)
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

// damaged names the damaged part behind err, for a split package.
func (r *Reader) damaged(ctx context.Context, err error) error {
	if r.parts == nil {
		return err
	}
	return r.parts.damaged(ctx, err)
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
