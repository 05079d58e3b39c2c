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
	"strconv"
	"strings"

	"github.com/ferrypkg/ferry/internal/diskspace"
	"github.com/opencontainers/go-digest"
)

// SplitOptions configures Split.
type SplitOptions struct {
	// PartSize is the size of every part but the last; at least
	// MinPartSize. Required.
	PartSize int64
	// Base is the path the parts extend (Base.part001, …, Base.parts.json);
	// the default is the package's path (of a split package, its archive's
	// path: the index's without .parts.json).
	Base string
	// Progress, if set, receives PhaseRead events as the archive is
	// verified, then PhaseWrite events as it is copied into parts: Item
	// the part being written, Bytes the archive's bytes copied so far (at
	// least PartialStep apart), TotalBytes its size.
	Progress ProgressFunc
}

// Split writes the package archive at src (or the parts of a split one)
// as parts of opts.PartSize bytes, the last smaller, and their index.
// Nothing is joined on disk. Of an archive, every blob and the graph are
// verified first (as Walk does), so that a damaged archive is refused
// rather than carried on in parts; of a split package, each part is
// checked against its index as it is copied; either way a damaged source
// is refused, naming it, with nothing written. The parts are written
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
	if r.parts == nil {
		if _, err := r.Walk(ctx, nil, opts.Progress); err != nil {
			return nil, fmt.Errorf("split %s: %w", src, err)
		}
	}
	// Of a split package, each part is checked against the sha256 its index
	// records as its last byte is copied: a damaged part is named, not
	// given a fresh digest that would hide it.
	f, size, err := r.OpenArchive()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size/opts.PartSize >= MaxParts {
		return nil, fmt.Errorf("split %s: %d-byte parts would make more than %d parts of its %d bytes", src, opts.PartSize, MaxParts, size)
	}
	ps, err := writeParts(base, opts.PartSize, r.root.Digest, func(w io.Writer) error {
		var src io.Reader = &ctxReader{ctx: ctx, r: f}
		if opts.Progress != nil {
			src = &splitProgress{r: src, fn: opts.Progress, part: opts.PartSize, total: size, next: PartialStep}
		}
		_, err := io.CopyBuffer(w, src, make([]byte, copyBufferSize))
		return err
	})
	if err != nil {
		return nil, r.damaged(ctx, fmt.Errorf("split %s: %w", src, err))
	}
	return ps, nil
}

// writeArchiveFile writes the archive again through write: one file,
// atomically, or parts of the size they had.
func (r *Reader) writeArchiveFile(write func(io.Writer) error) error {
	if r.parts == nil {
		_, err := WriteFileAtomic(r.path, write)
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
	if err := s.bound(r.config, len(r.configData)); err != nil {
		return err
	}
	r.parts = s
	return nil
}

// partMode is the mode of parts and their index: an archive's (0644).
const partMode = 0o644

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
			err = diskspace.Explain(partName(base, max(len(pw.parts)-1, 0)), pw.total, err) // the part it filled on
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
	if err := idx.Chmod(partMode); err != nil {
		idx.Close()
		return nil, err
	}
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
			// As an archive is written (CreateTemp makes 0600).
			if err := f.Chmod(partMode); err != nil {
				f.Close()
				os.Remove(f.Name())
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

// splitProgress reports a split's copy: the part being written and the
// archive's bytes copied so far, each PartialStep.
type splitProgress struct {
	r           io.Reader
	fn          ProgressFunc
	part, total int64
	n, next     int64
}

func (s *splitProgress) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if s.n >= s.next || err == io.EOF {
		s.next = s.n + PartialStep
		s.fn(Progress{Phase: PhaseWrite, Item: fmt.Sprintf("part %d of %d", min(s.n/s.part+1, (s.total+s.part-1)/s.part), (s.total+s.part-1)/s.part), Bytes: s.n, TotalBytes: s.total})
	}
	return n, err
}
