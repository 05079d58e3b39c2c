package artifact

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/ferrypkg/ferry/artifact/internal/zstdframe"
	"github.com/ferrypkg/ferry/internal/atomicfile"
	"github.com/ferrypkg/ferry/internal/readahead"
)

// Format is an archive format.
type Format string

// Archive formats.
const (
	FormatTarZstd Format = "tar.zst"
	FormatTar     Format = "tar"
)

// Ext is the file name extension of the format, with its dot.
func (f Format) Ext() string { return "." + string(f) }

// FormatFromPath picks the format from a file name: .tar is plain tar,
// anything else is tar.zst.
func FormatFromPath(path string) Format {
	if strings.HasSuffix(path, ".tar") {
		return FormatTar
	}
	return FormatTarZstd
}

// Entry names inside a package archive, besides ConfigFileName.
const (
	layoutFileName = ocispec.ImageLayoutFile // oci-layout
	indexFileName  = "index.json"
	blobsDir       = ocispec.ImageBlobsDir + "/" // blobs/
	blobsSHA256Dir = blobsDir + "sha256/"
)

// layoutFileData is the content of oci-layout.
var layoutFileData = []byte(`{"imageLayoutVersion":"1.0.0"}`)

// copyBufferSize is the buffer used to move blob bytes.
const copyBufferSize = 1 << 20

// ordered lists the plan's blobs in canonical order (see canonicalOrder),
// each with its canonical descriptor, whose media type decides how the blob
// is stored: the same graph then always gives the same archive.
func (p *Plan) ordered() ([]*Blob, error) {
	descs, err := graph.CanonicalOrder(p.Index, func(d ocispec.Descriptor) ([]byte, error) {
		b, ok := p.Blobs[d.Digest]
		if !ok || b.Data == nil {
			return nil, fmt.Errorf("manifest %s is not held in memory", d.Digest)
		}
		return b.Data, nil
	})
	if err != nil {
		return nil, err
	}
	list := make([]*Blob, 0, len(descs))
	for _, d := range descs {
		b, ok := p.Blobs[d.Digest]
		if !ok {
			return nil, fmt.Errorf("blob %s missing", d.Digest)
		}
		list = append(list, &Blob{Desc: d, Data: b.Data, Open: b.Open})
	}
	return list, nil
}

// WriteArchive writes the package: ferry.json, oci-layout, index.json, then
// every blob once, children before parents, each verified as it is copied.
func (p *Plan) WriteArchive(ctx context.Context, w io.Writer, format Format, progress ProgressFunc) (err error) {
	var frames *zstdframe.Writer
	if format == FormatTarZstd {
		if frames, err = zstdframe.NewWriter(w); err != nil {
			return err
		}
		defer func() {
			if cerr := frames.Close(); err == nil {
				err = cerr
			}
		}()
		w = frames
	}
	aw := &archiveWriter{tw: tar.NewWriter(w), frames: frames, mtime: p.Mtime, prefetch: make([]byte, 4*copyBufferSize), progress: progress}
	if err := aw.file(ConfigFileName, p.ConfigData); err != nil {
		return err
	}
	if err := aw.file(layoutFileName, layoutFileData); err != nil {
		return err
	}
	if err := aw.file(indexFileName, p.IndexJSON); err != nil {
		return err
	}
	if err := aw.dir(blobsDir); err != nil {
		return err
	}
	if err := aw.dir(blobsSHA256Dir); err != nil {
		return err
	}
	blobs, err := p.ordered()
	if err != nil {
		return err
	}
	var total int64
	for _, b := range blobs {
		total += b.Desc.Size
	}
	for _, b := range blobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := aw.blob(ctx, b); err != nil {
			return err
		}
		if progress != nil {
			progress(Progress{Phase: PhaseWrite, Desc: b.Desc, Bytes: b.Desc.Size, TotalBytes: total, TotalBlobs: len(blobs)})
		}
	}
	return aw.tw.Close()
}

type archiveWriter struct {
	tw *tar.Writer
	// frames, for tar.zst, stores compressed blobs in raw blocks.
	frames *zstdframe.Writer
	mtime  time.Time
	// prefetch holds the chunks a blob's source is read ahead into, so
	// fetching (disk, network) overlaps with hashing and compressing.
	prefetch []byte
	// progress, if set, hears of large blobs as they are read.
	progress ProgressFunc
}

func (a *archiveWriter) header(name string, typ byte, mode, size int64) error {
	return a.tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: a.mtime})
}

func (a *archiveWriter) dir(name string) error { return a.header(name, tar.TypeDir, 0o755, 0) }

func (a *archiveWriter) file(name string, data []byte) error {
	if err := a.header(name, tar.TypeReg, 0o644, int64(len(data))); err != nil {
		return err
	}
	_, err := a.tw.Write(data)
	return err
}

func blobPath(d digest.Digest) string { return blobsDir + d.Algorithm().String() + "/" + d.Encoded() }

// blob copies one blob into the archive, checking size and digest.
func (a *archiveWriter) blob(ctx context.Context, b *Blob) error {
	stored := a.frames != nil && b.Desc.Size > 0 && zstdframe.StoredMediaType(b.Desc.MediaType)
	body := func() error {
		_, err := a.tw.Write(b.Data)
		return err
	}
	if b.Data == nil {
		if !b.Desc.Digest.Algorithm().Available() {
			return fmt.Errorf("blob %s: unsupported digest algorithm", b.Desc.Digest)
		}
		rc, err := b.Open(ctx)
		if err != nil {
			return &BlobError{Op: "fetch", Digest: b.Desc.Digest, Err: err}
		}
		defer rc.Close()
		src := withPartial(rc, newPartial(a.progress, PhaseWrite, b.Desc))
		pr := readahead.New(io.LimitReader(src, b.Desc.Size+1), a.prefetch, b.Desc.Digest.Algorithm().Hash())
		defer pr.Close()
		body = func() error { return copyVerified(ctx, a.tw, pr, b.Desc) }
	}
	if err := a.header(blobPath(b.Desc.Digest), tar.TypeReg, 0o644, b.Desc.Size); err != nil {
		return err
	}
	if !stored {
		return body()
	}
	if err := a.frames.BeginRaw(b.Desc.Size); err != nil {
		return err
	}
	if err := body(); err != nil {
		return err
	}
	return a.frames.EndRaw()
}

// copyVerified copies exactly desc.Size bytes from pr, which hashes them,
// to w, and fails unless they hash to desc.Digest (a corruptBlobError
// otherwise: ErrCorrupt, naming the blob) and pr has nothing more.
// Its chunks are written as they are: whole prefetch chunks (multiples of
// rawBlockSize) but the last, so raw frames take them without copying.
func copyVerified(ctx context.Context, w io.Writer, pr *readahead.Reader, desc ocispec.Descriptor) error {
	var n int64
	err := pr.Chunks(func(b []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if n+int64(len(b)) > desc.Size {
			return fmt.Errorf("longer than its %d bytes", desc.Size)
		}
		n += int64(len(b))
		_, err := w.Write(b)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("blob %s: %w", desc.Digest, err)
	case n < desc.Size:
		return fmt.Errorf("blob %s: truncated: %d of %d bytes", desc.Digest, n, desc.Size)
	case digest.NewDigest(desc.Digest.Algorithm(), pr.Sum()) != desc.Digest:
		return corruptBlobError(desc.Digest)
	}
	return nil
}

// WriteFileAtomic writes path (mode 0644) as atomicfile.Write does.
func WriteFileAtomic(path string, write func(io.Writer) error) (int64, error) {
	return atomicfile.Write(path, 0o644, write)
}
