package build

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// advisories loads a vulnerability database the definition names, within
// advisory.DefaultLimits, and adds it as one zip layer: a zip as it is, a
// folder of records zipped (advisory.Pack: name order, no times, the same
// records the same bytes) into the spool folder.
func (b *builder) advisories(ad definition.Advisories) (ocispec.Descriptor, artifact.Advisories, error) {
	src, err := b.folder.CleanPath(ad.Source)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Advisories{}, err
	}
	fi, err := b.folder.Stat(src)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Advisories{}, err
	}
	var (
		d  ocispec.Descriptor
		db *advisory.DB
	)
	if fi.IsDir() {
		d, db, err = b.packAdvisories(src)
	} else {
		d, db, err = b.zipAdvisories(src)
	}
	if err != nil {
		return ocispec.Descriptor{}, artifact.Advisories{}, err
	}
	rec := artifact.Advisories{Source: src, Digest: d.Digest, Size: d.Size, Records: db.Len()}
	if !db.Date().IsZero() {
		rec.Modified = db.Date().Format(time.RFC3339)
	}
	return d, rec, nil
}

// zipAdvisories checks the zip src and adds it as it is; its bytes are
// read again (and checked) when the archive is written.
func (b *builder) zipAdvisories(src string) (ocispec.Descriptor, *advisory.DB, error) {
	f, fi, err := b.folder.Open(src)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	defer f.Close()
	db, err := advisory.Load(f, fi.Size(), advisory.DefaultLimits)
	if err != nil {
		return ocispec.Descriptor{}, nil, fmt.Errorf("%s: %w", src, err)
	}
	dg := digest.SHA256.Digester()
	n, err := io.Copy(dg.Hash(), io.NewSectionReader(f, 0, fi.Size()))
	if err != nil {
		return ocispec.Descriptor{}, nil, fmt.Errorf("%s: %w", src, err)
	}
	d := ocispec.Descriptor{MediaType: artifact.MediaTypeAdvisories, Digest: dg.Digest(), Size: n}
	b.add(&artifact.Blob{Desc: d, Open: func(context.Context) (io.ReadCloser, error) {
		f, _, err := b.folder.Open(src)
		return f, err
	}})
	return d, db, nil
}

// packAdvisories zips the folder src into the spool folder.
func (b *builder) packAdvisories(src string) (ocispec.Descriptor, *advisory.DB, error) {
	if b.spool == nil {
		dir, err := scratch.MkdirTemp("", "ferry-create-")
		if err != nil {
			return ocispec.Descriptor{}, nil, err
		}
		b.spool = dir
	}
	f, err := os.CreateTemp(b.spool.Path, "advisories-*.zip")
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	dg := digest.SHA256.Digester()
	cw := &countWriter{w: io.MultiWriter(f, dg.Hash())}
	db, err := advisory.Pack(cw, b.folder.FS(), filepath.ToSlash(src), advisory.DefaultLimits)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ocispec.Descriptor{}, nil, fmt.Errorf("%s: %w", src, err)
	}
	d := ocispec.Descriptor{MediaType: artifact.MediaTypeAdvisories, Digest: dg.Digest(), Size: cw.n}
	path := f.Name()
	b.add(&artifact.Blob{Desc: d, Open: func(context.Context) (io.ReadCloser, error) { return os.Open(path) }})
	return d, db, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
