package artifact

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

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
		if err := graph.CheckDescriptor(d); err != nil {
			return corruptIn("", err)
		}
		if _, omitted := w.r.delta.omittedBlob(d.Digest); omitted {
			return nil // a delta leaves it out
		}
		if graph.IsContainer(d.MediaType) {
			data, err := w.r.readBlobFile(d)
			if err != nil {
				return err
			}
			kids, err := graph.Children(d.MediaType, data)
			if err != nil {
				return fmt.Errorf("%w: blob %s: %w", ErrCorrupt, d.Digest, err)
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
	for _, d := range w.r.index.Manifests {
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
	data, err := confine.ReadAll(f, name, limit)
	if errors.Is(err, confine.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w (it grew while read)", ErrCorrupt, err)
	}
	return data, err
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
	delta, err := head(deltaFileName, nil)
	if err != nil {
		return err
	}
	if delta != nil {
		if err := r.setDelta(delta); err != nil {
			return err
		}
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
	if r.config == nil {
		// Read the config through the graph: root → package manifest → config.
		return r.configFromGraph()
	}
	return nil
}

func (r *Reader) configFromGraph() error {
	data, err := r.readBlobFile(r.root)
	if err != nil {
		return err
	}
	var root ocispec.Index
	if err := json.Unmarshal(data, &root); err != nil {
		return corruptIn("root", err)
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
			return corruptIn("package manifest", err)
		}
		cdata, err := r.readBlobFile(pm.Config)
		if err != nil {
			return err
		}
		return r.setConfig(cdata)
	}
	return fmt.Errorf("%w: the package root has no package manifest", ErrCorrupt)
}
