package advisory

import (
	"archive/zip"
	"fmt"
	"io"
	"io/fs"
	"path"
)

// Pack loads the folder dir of fsys as LoadFS does and writes its records
// to w as a zip that Load reads: entries in name order, no times, so that
// the same records make the same bytes. It returns the database loaded.
func Pack(w io.Writer, fsys fs.FS, dir string, lim Limits) (*DB, error) {
	db := New(lim)
	names, err := db.listFS(fsys, dir)
	if err != nil {
		return nil, err
	}
	zw := zip.NewWriter(w)
	for _, n := range names {
		p := path.Join(dir, n)
		data, err := readFile(fsys, p, db.lim.MaxRecordBytes)
		if err != nil {
			return nil, fmt.Errorf("advisory %w", err)
		}
		if err := db.add(p, data); err != nil {
			return nil, err
		}
		fw, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate})
		if err != nil {
			return nil, err
		}
		if _, err := fw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return db, nil
}
