package registry

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
)

// MigrateResult tells what Migrate copied and verified.
type MigrateResult struct {
	// Objects and Bytes are what was copied: every object of the storage
	// (blobs, manifests, tags, links, ferry's side records).
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// Blobs is how many blobs were read back from the destination and
	// found to match their digests.
	Blobs int `json:"blobs"`
}

// blobsDir is where distribution keeps blob data: blobs/<alg>/<2 hex>/<hex>/data.
const blobsDir = "/docker/registry/v2/blobs"

// Migrate copies every repository of from's storage to to's — every object
// under the storage's root, so tags, untagged manifests, referrers and
// sha512 aliases come along — then reads back every blob from to and
// checks it against its digest. from is put in read-only maintenance mode
// meanwhile (its registries keep serving pulls, opts.Settle as for
// GarbageCollect) and returned to read-write before it returns; upload sessions in
// progress and the maintenance flag are not copied. to should be a new,
// empty storage that no registry serves yet.
func Migrate(ctx context.Context, from, to Config, opts GCOptions) (res MigrateResult, err error) {
	defer quietLogs()()
	name := fmt.Sprintf("migrate %s to %s", from.storageName(), to.storageName())
	src, err := openRegistry(ctx, from, name)
	if err != nil {
		return res, err
	}
	if to.RootDir == "" && to.S3 == nil {
		return res, fmt.Errorf("%s: in-memory storage is not shared", name)
	}
	if err := to.validate(); err != nil {
		return res, err
	}
	dst, err := to.openDriver(ctx)
	if err != nil {
		return res, err
	}
	leave, err := enterReadOnly(ctx, src, settleTime(opts))
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if lerr := leave(); lerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", name, lerr)
		}
	}()
	err = src.Walk(ctx, "/", func(fi storagedriver.FileInfo) error {
		if fi.IsDir() {
			if p := fi.Path(); p == "/ferry/maintenance" || p == "/ferry/probe" || path.Base(p) == "_uploads" {
				return storagedriver.ErrSkipDir
			}
			return nil
		}
		if fi.Path() == httpSecretPath {
			return nil
		}
		n, err := copyObject(ctx, src, dst, fi.Path())
		if err != nil {
			return fmt.Errorf("copy %s: %w", fi.Path(), err)
		}
		res.Objects++
		res.Bytes += n
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if res.Blobs, err = verifyBlobs(ctx, dst); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if err := leave(); err != nil { // settles: from's registries take pushes again
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

func copyObject(ctx context.Context, src, dst storagedriver.StorageDriver, p string) (int64, error) {
	r, err := src.Reader(ctx, p, 0)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	w, err := dst.Writer(ctx, p, false)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, r)
	if err != nil {
		_ = w.Cancel(ctx)
		return n, err
	}
	if err := w.Commit(ctx); err != nil {
		_ = w.Close()
		return n, err
	}
	return n, w.Close()
}

// verifyBlobs reads every blob of d and checks it against its digest.
func verifyBlobs(ctx context.Context, d storagedriver.StorageDriver) (int, error) {
	n := 0
	err := d.Walk(ctx, blobsDir, func(fi storagedriver.FileInfo) error {
		if fi.IsDir() || path.Base(fi.Path()) != "data" {
			return nil
		}
		// blobs/<alg>/<2 hex>/<hex>/data
		parts := strings.Split(strings.TrimPrefix(fi.Path(), blobsDir+"/"), "/")
		if len(parts) != 4 {
			return nil
		}
		want := digest.NewDigestFromEncoded(digest.Algorithm(parts[0]), parts[2])
		if err := want.Validate(); err != nil {
			return fmt.Errorf("blob %s: %w", fi.Path(), err)
		}
		r, err := d.Reader(ctx, fi.Path(), 0)
		if err != nil {
			return err
		}
		v := want.Algorithm().Digester()
		_, err = io.Copy(v.Hash(), r)
		r.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", want, err)
		}
		if got := v.Digest(); got != want {
			return fmt.Errorf("blob %s reads back as %s", want, got)
		}
		n++
		return nil
	})
	return n, err
}
