package zarf

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
)

// splitHeader is the .part000 of a multi-part package (Zarf's
// src/internal/split): the whole's sha256 and size, and how many parts
// (.part001 …) hold it, every one but the last of the same size.
type splitHeader struct {
	Sha256Sum string
	Bytes     int64
	Count     int
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// archive is the tar stream of a built package, opened by openArchive.
type archive struct {
	r     io.Reader     // the tar, decompressed
	zr    *zstd.Decoder // when zstd-compressed
	files []*os.File
}

func (a *archive) Close() {
	if a.zr != nil {
		a.zr.Close()
	}
	for _, f := range a.files {
		f.Close()
	}
}

// openArchive opens the package's tar stream: zstd or plain, one file or
// the parts that .part000 describes. Every file is opened without blocking
// and must be a regular file (a part, not even a link to one). A
// multi-part package is checked whole before anything is extracted:
// at most MaxParts parts, each of the size Zarf gives parts, adding up to
// the header's Bytes and hashing to its Sha256Sum; the first mismatch
// stops it. As the package archive reader's, the stream is bounded: a
// zstd frame may declare a window of at most artifact.MaxZstdWindow, and
// the stream may give at most artifact.MaxExpansion times the bytes read
// from disk (past artifact.MaxManifestSize), so a bomb is refused before
// it fills the disk.
func openArchive(name string) (_ *archive, err error) {
	a := &archive{}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	var r io.Reader
	if base, ok := strings.CutSuffix(name, ".part000"); ok {
		if r, err = a.openParts(name, base); err != nil {
			return nil, err
		}
	} else {
		f, _, err := openRegular(name, true)
		if err != nil {
			return nil, named(name, err)
		}
		a.files = append(a.files, f)
		r = f
	}
	counted := &countingReader{r: r}
	br := bufio.NewReader(counted)
	if magic, _ := br.Peek(4); bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		a.zr, err = zstd.NewReader(br, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(artifact.MaxZstdWindow), zstd.WithDecoderMaxMemory(artifact.MaxZstdWindow*4))
		if err != nil {
			return nil, err
		}
		a.r = &expansionLimit{r: a.zr, in: counted}
		return a, nil
	}
	a.r = br
	return a, nil
}

// openParts checks the parts .part000 (header) describes and returns
// their stream. Their sha256 is checked before it is read; what is then
// read is held to the sizes checked (the files it holds are checked
// against checksums.txt as they come).
func (a *archive) openParts(header, base string) (io.Reader, error) {
	f, _, err := openRegular(header, true)
	if err != nil {
		return nil, named(header, err)
	}
	data, err := confine.ReadAll(f, header, artifact.MaxManifestSize)
	f.Close()
	if err != nil {
		return nil, err
	}
	var h splitHeader
	if err := json.Unmarshal(data, &h); err != nil || h.Count < 1 || h.Bytes < 1 || !sha256Hex.MatchString(h.Sha256Sum) {
		return nil, fmt.Errorf("%s is not the header of a multi-part Zarf package (JSON naming the parts' Count, Bytes and Sha256Sum)", header)
	}
	if h.Count > MaxParts {
		return nil, fmt.Errorf("%s names %s parts, more than %s", header, count(h.Count), count(MaxParts))
	}
	var readers []io.Reader
	var total, size int64
	for i := 1; i <= h.Count; i++ {
		p := fmt.Sprintf("%s.part%03d", base, i)
		f, fi, err := openRegular(p, false)
		if err != nil {
			return nil, fmt.Errorf("part %d of %d: %w", i, h.Count, named(p, err))
		}
		a.files = append(a.files, f)
		if i == 1 {
			size = fi.Size()
		}
		total += fi.Size()
		switch {
		case fi.Size() == 0 || fi.Size() > size || i < h.Count && fi.Size() != size:
			return nil, fmt.Errorf("%w: %s is %d bytes; the parts before the last are of one size (%d), the last at most that", ErrIntegrity, filepath.Base(p), fi.Size(), size)
		case total > h.Bytes:
			return nil, fmt.Errorf("%w: the parts up to %s hold %d bytes, more than the %d it records", ErrIntegrity, filepath.Base(p), total, h.Bytes)
		}
		readers = append(readers, io.LimitReader(f, fi.Size()))
	}
	if total != h.Bytes {
		return nil, fmt.Errorf("%w: the parts hold %d bytes, not the %d it records", ErrIntegrity, total, h.Bytes)
	}
	// The whole is hashed before a byte of it is extracted.
	sum := sha256.New()
	if n, err := io.Copy(sum, io.MultiReader(readers...)); err != nil || n != total {
		return nil, fmt.Errorf("reading the parts of %s: %d of %d bytes: %v", header, n, total, pathError(err))
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.Sha256Sum {
		return nil, fmt.Errorf("%w: the parts hold sha256 %s, not the %s it records", ErrIntegrity, got, h.Sha256Sum)
	}
	readers = readers[:0]
	for _, f := range a.files {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		readers = append(readers, io.LimitReader(f, fi.Size()))
	}
	return io.MultiReader(readers...), nil
}

// ReadDefinition reads the zarf.yaml at path, for Convert: a regular file
// (a FIFO or a device is refused without blocking) of at most
// definition.MaxSize bytes.
func ReadDefinition(path string) ([]byte, error) {
	f, fi, err := openRegular(path, true)
	if err != nil {
		return nil, named(path, err)
	}
	defer f.Close()
	if fi.Size() > definition.MaxSize {
		return nil, fmt.Errorf("%s is %w: %d bytes, more than %d", path, confine.ErrTooLarge, fi.Size(), definition.MaxSize)
	}
	data, err := confine.ReadAll(f, path, definition.MaxSize)
	return data, pathError(err)
}

// openRegular opens the file p for reading without blocking (a FIFO
// nobody writes to) and refuses anything but a regular file; with follow
// false, a symbolic link too (it is not followed). Its errors do not name
// p: the caller does, once.
func openRegular(p string, follow bool) (*os.File, fs.FileInfo, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK
	if !follow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(p, flags, 0)
	if errors.Is(err, syscall.ELOOP) && !follow {
		return nil, nil, errors.New("is a symbolic link, not a regular file")
	}
	if err != nil {
		return nil, nil, bare(err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("is not a regular file (%s)", confine.TypeName(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, nil, bare(err)
	}
	return f, fi, nil
}

// named is an error of openRegular's about p, naming p: "p is not a
// regular file (…)", "p: no such file or directory".
func named(p string, err error) error {
	if strings.HasPrefix(err.Error(), "is ") {
		return fmt.Errorf("%s %w", p, err)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// bare is err without the path an *fs.PathError adds.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// expansionLimit refuses a decompressed stream that gives more than
// artifact.MaxExpansion times the compressed bytes read (past
// artifact.MaxManifestSize).
type expansionLimit struct {
	r   io.Reader
	in  *countingReader
	out int64
}

func (e *expansionLimit) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.out += int64(n)
	if e.out > artifact.MaxManifestSize && e.out > artifact.MaxExpansion*e.in.n {
		return n, fmt.Errorf("%w: it expands to more than %d times its size (a zstd bomb?)", artifact.ErrCorrupt, artifact.MaxExpansion)
	}
	return n, err
}
