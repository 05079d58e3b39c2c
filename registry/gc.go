package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// GCResult tells what a garbage collection freed.
type GCResult struct {
	// Before and After are the bytes of the storage's objects.
	Before int64 `json:"before"`
	After  int64 `json:"after"`
}

// GCOptions tunes GarbageCollect.
type GCOptions struct {
	// Settle is how long the collection waits, after setting the read-only
	// flag, before it marks: every registry on the storage must have seen
	// the flag (Config.MaintenancePoll) and finished the writes it had in
	// flight. Zero means twice DefaultMaintenancePoll plus a second.
	Settle time.Duration
}

// GarbageCollect deletes from cfg's storage (filesystem or S3) every blob
// that no manifest of any repository references any more (distribution's
// mark and sweep). Manifests deleted through the API are then gone for good;
// untagged manifests are kept (referrers are untagged).
//
// It runs in read-only maintenance mode: it sets the flag every registry on
// the storage follows (they keep serving pulls and refuse pushes), waits
// opts.Settle, collects, clears the flag (also when the collection fails)
// and waits opts.Settle again. The registries then start afresh, without
// cached blob descriptors of what was swept.
func GarbageCollect(ctx context.Context, cfg Config, opts GCOptions) (res GCResult, err error) {
	name := "garbage collect " + cfg.storageName()
	d, err := openRegistry(ctx, cfg, name)
	if err != nil {
		return res, err
	}
	if res.Before, err = usage(ctx, d); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	settle := settleTime(opts)
	leave, err := enterReadOnly(ctx, d, settle)
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if lerr := leave(); lerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", name, lerr)
		}
	}()
	ns, err := storage.NewRegistry(ctx, d, storage.EnableDelete)
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if err := storage.MarkAndSweep(ctx, d, ns, storage.GCOpts{Quiet: true}); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if err := leave(); err != nil { // settles: every registry takes pushes again
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if res.After, err = usage(ctx, d); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// usage sums the sizes of the storage's objects.
func usage(ctx context.Context, d storagedriver.StorageDriver) (int64, error) {
	var n int64
	err := d.Walk(ctx, "/", func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storage usage: %w", err)
	}
	return n, nil
}
