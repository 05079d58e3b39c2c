package advisory

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/ferrypkg/ferry/internal/confine"
)

// MaxRatio bounds how much a zip of records may expand: its entries'
// declared sizes together at most MaxRatio times the zip's size (plus
// 1 MiB). OSV's JSON compresses 5–15×.
const MaxRatio = 100

// Load reads a zip of OSV records (osv.dev's `all.zip` layout: one JSON
// record per entry; entries not named *.json are skipped) of size bytes
// from r. Nothing is written anywhere: entry names are only names.
func Load(r io.ReaderAt, size int64, lim Limits) (*DB, error) {
	db := New(lim)
	if err := db.LoadZip(r, size); err != nil {
		return nil, err
	}
	return db, nil
}

// LoadDir reads a folder of OSV records (golang.org/x/vulndb's data/osv
// layout: one *.json record per file; other files and sub-folders are
// skipped), each opened inside dir (internal/confine: a link out, a FIFO
// or a device is refused without blocking).
func LoadDir(dir string, lim Limits) (*DB, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("advisories %s: %w", dir, err)
	}
	defer root.Close()
	db := New(lim)
	if err := db.LoadFS(confine.FS(root), "."); err != nil {
		return nil, err
	}
	return db, nil
}

// LoadZip adds the records of a zip, as Load reads them, to db.
func (db *DB) LoadZip(r io.ReaderAt, size int64) error {
	lim := db.lim
	if size > lim.MaxBytes {
		return &LimitError{What: "bytes of the zip", Got: size, Max: lim.MaxBytes}
	}
	entries, dirSize, err := zipDirectory(r, size)
	if err != nil {
		return err
	}
	if entries > uint64(lim.MaxRecords) {
		return &LimitError{What: "zip entries", Got: int64(min(entries, 1<<62)), Max: int64(lim.MaxRecords)}
	}
	// zip.NewReader holds the directory: at most 1 KiB a name on average.
	if dirSize > entries*1024+64<<10 {
		return fmt.Errorf("advisory database: a zip directory of %d bytes for %d entries", dirSize, entries)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return fmt.Errorf("advisory database: not a zip: %w", err)
	}
	var declared uint64
	for _, f := range zr.File {
		declared += min(f.UncompressedSize64, 1<<62)
		if declared > uint64(lim.MaxBytes) {
			return &LimitError{What: "bytes of records the zip declares", Got: int64(min(declared, 1<<62)), Max: lim.MaxBytes}
		}
	}
	if declared > uint64(size)*MaxRatio+1<<20 {
		return fmt.Errorf("advisory database: a zip of %d bytes declares %d bytes of records, more than %d times its size", size, declared, MaxRatio)
	}
	var buf bytes.Buffer
	for _, f := range zr.File {
		if f.FileInfo().IsDir() || !strings.HasSuffix(f.Name, ".json") {
			continue
		}
		name := fmt.Sprintf("%.200q", f.Name)
		if f.UncompressedSize64 > uint64(lim.MaxRecordBytes) {
			return &LimitError{Record: name, What: "bytes", Got: int64(min(f.UncompressedSize64, 1<<62)), Max: lim.MaxRecordBytes}
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("advisory %s: %w", name, err)
		}
		buf.Reset()
		// archive/zip refuses an entry longer or shorter than it declares.
		_, err = buf.ReadFrom(io.LimitReader(rc, lim.MaxRecordBytes+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("advisory %s: %w", name, err)
		}
		if err := db.add(name, buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// LoadFS adds the records of the folder dir of fsys, as LoadDir reads
// them, to db.
func (db *DB) LoadFS(fsys fs.FS, dir string) error {
	names, err := db.listFS(fsys, dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		data, err := readFile(fsys, p, db.lim.MaxRecordBytes)
		if err != nil {
			return fmt.Errorf("advisory %w", err)
		}
		if err := db.add(p, data); err != nil {
			return err
		}
	}
	return nil
}

// listFS lists the *.json regular files of the folder dir of fsys, sorted
// (so that a database's first refusal is the same everywhere). Names are
// read a batch at a time: a folder of more than MaxRecords files is
// refused before the rest of its names are listed.
func (db *DB) listFS(fsys fs.FS, dir string) ([]string, error) {
	f, err := fsys.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("advisories: %w", err)
	}
	defer f.Close()
	d, ok := f.(fs.ReadDirFile)
	if !ok {
		return nil, fmt.Errorf("advisories: %s is not a folder", dir)
	}
	var names []string
	for {
		batch, err := d.ReadDir(1024)
		for _, e := range batch {
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".json") {
				names = append(names, e.Name())
			}
		}
		if len(names) > db.lim.MaxRecords {
			return nil, &LimitError{What: "records in " + dir, Got: int64(len(names)), Max: int64(db.lim.MaxRecords)}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("advisories %s: %w", dir, err)
		}
	}
	slices.Sort(names)
	return names, nil
}

// readFile reads the regular file name of fsys, at most max bytes.
func readFile(fsys fs.FS, name string, max int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if fi.Size() > max {
		return nil, &LimitError{What: "bytes", Record: name, Got: fi.Size(), Max: max}
	}
	return confine.ReadAll(f, name, max)
}

// zipDirectory reads a zip's end of central directory record (and its
// zip64 form): the number of entries and the directory's size, which
// archive/zip would otherwise hold whole before anyone could look.
func zipDirectory(r io.ReaderAt, size int64) (entries, dirSize uint64, err error) {
	const eocdLen, maxComment = 22, 65535
	tail := min(size, eocdLen+maxComment)
	if tail < eocdLen {
		return 0, 0, errors.New("advisory database: not a zip: too short")
	}
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, fmt.Errorf("advisory database: %w", err)
	}
	at := -1
	for i := len(buf) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) == 0x06054b50 {
			at = i
			break
		}
	}
	if at < 0 {
		return 0, 0, errors.New("advisory database: not a zip: no end of central directory")
	}
	e := buf[at:]
	entries = uint64(binary.LittleEndian.Uint16(e[10:]))
	dirSize = uint64(binary.LittleEndian.Uint32(e[12:]))
	if entries != 0xffff && dirSize != 0xffffffff && binary.LittleEndian.Uint32(e[16:]) != 0xffffffff {
		return entries, dirSize, nil
	}
	// zip64: a locator just before, pointing at the zip64 record.
	loc := size - tail + int64(at) - 20
	if loc < 0 {
		return entries, dirSize, nil
	}
	var l [20]byte
	if _, err := r.ReadAt(l[:], loc); err != nil || binary.LittleEndian.Uint32(l[:]) != 0x07064b50 {
		return entries, dirSize, nil
	}
	off := binary.LittleEndian.Uint64(l[8:])
	var z [56]byte
	if off > uint64(size) {
		return 0, 0, errors.New("advisory database: not a zip: a zip64 record past its end")
	}
	if _, err := r.ReadAt(z[:], int64(off)); err != nil || binary.LittleEndian.Uint32(z[:]) != 0x06064b50 {
		return 0, 0, errors.New("advisory database: not a zip: a damaged zip64 record")
	}
	return binary.LittleEndian.Uint64(z[32:]), binary.LittleEndian.Uint64(z[40:]), nil
}
