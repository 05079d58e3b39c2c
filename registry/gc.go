package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// GCResult tells what a garbage collection freed.
type GCResult struct {
	// Before and After are the bytes of the storage's objects.
	Before int64 `json:"before"`
	After  int64 `json:"after"`
	// A dry run's: Freeable is the bytes a collection would delete, Blobs
	// the blobs among them (After is Before less Freeable).
	DryRun   bool  `json:"dryRun,omitempty"`
	Freeable int64 `json:"freeable,omitempty"`
	Blobs    int   `json:"blobs,omitempty"`
	// Uploads is what was removed of abandoned upload sessions (not in a
	// dry run).
	Uploads PurgeResult `json:"uploads"`
}

// GCOptions tunes GarbageCollect.
type GCOptions struct {
	// Settle is how long the collection waits, after setting the read-only
	// flag, before it marks: every registry on the storage must have seen
	// the flag (Config.MaintenancePoll) and finished the writes it had in
	// flight. Zero means twice DefaultMaintenancePoll plus a second.
	Settle time.Duration
	// DryRun measures what a collection would delete and deletes nothing:
	// distribution's own mark and sweep over the storage, its deletes
	// counted instead of done. It needs no read-only mode.
	DryRun bool
}

// GarbageCollect deletes from cfg's storage (filesystem or S3) every blob
// that no manifest of any repository references any more (distribution's
// mark and sweep). Manifests deleted through the API are then gone for good;
// untagged manifests are kept (referrers are untagged).
//
// It runs in read-only maintenance mode: it sets the flag every registry on
// the storage follows (they keep serving pulls and refuse pushes), waits
// opts.Settle, collects, clears the flag (also when the collection fails)
// and waits opts.Settle again. While read-only it also removes every upload
// session not written to since the flag was set (PurgeUploads): none can
// be meanwhile, so these are abandoned (a killed load, a client that gave
// up) or refused; their clients start again. The registries then start afresh, without
// cached blob descriptors of what was swept.
func GarbageCollect(ctx context.Context, cfg Config, opts GCOptions) (res GCResult, err error) {
	defer quietLogs()()
	name := "garbage collect " + cfg.storageName()
	d, err := openRegistry(ctx, cfg, name)
	if err != nil {
		return res, err
	}
	if res.Before, err = usage(ctx, d); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if opts.DryRun {
		return dryRun(ctx, d, res, name)
	}
	settle := settleTime(opts)
	readOnlyFrom := time.Now()
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
	if err := storage.MarkAndSweep(ctx, d, aliasNamespace{Namespace: ns, d: d}, storage.GCOpts{Quiet: true}); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if res.Uploads, err = purgeUploads(ctx, d, readOnlyFrom); err != nil {
		return res, fmt.Errorf("%s: purge uploads: %w", name, err)
	}
	if err := leave(); err != nil { // settles: every registry takes pushes again
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if res.After, err = usage(ctx, d); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// dryRun runs the mark and sweep over a driver that counts the deletes
// and refuses every write.
func dryRun(ctx context.Context, d storagedriver.StorageDriver, res GCResult, name string) (GCResult, error) {
	counter := &countingDriver{StorageDriver: d}
	ns, err := storage.NewRegistry(ctx, counter, storage.EnableDelete)
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if err := storage.MarkAndSweep(ctx, counter, aliasNamespace{Namespace: ns, d: d}, storage.GCOpts{Quiet: true}); err != nil {
		return res, fmt.Errorf("%s (dry run): %w", name, err)
	}
	res.DryRun, res.Freeable, res.Blobs = true, counter.bytes, counter.blobs
	res.After = res.Before - res.Freeable
	return res, nil
}

// countingDriver is a storage driver whose deletes only count the bytes
// they would free, and which writes nothing.
type countingDriver struct {
	storagedriver.StorageDriver
	bytes int64
	blobs int
}

var errDryRun = errors.New("a dry run writes nothing")

func (c *countingDriver) Delete(ctx context.Context, path string) error {
	n, err := usageUnder(ctx, c.StorageDriver, path)
	if err != nil {
		return err
	}
	c.bytes += n
	if strings.Contains(path, "/blobs/") {
		c.blobs++
	}
	return nil
}

func (c *countingDriver) PutContent(context.Context, string, []byte) error { return errDryRun }

func (c *countingDriver) Writer(context.Context, string, bool) (storagedriver.FileWriter, error) {
	return nil, errDryRun
}

func (c *countingDriver) Move(context.Context, string, string) error { return errDryRun }

// usage sums the sizes of the storage's objects.
func usage(ctx context.Context, d storagedriver.StorageDriver) (int64, error) {
	return walkSize(ctx, d, "/")
}

// usageUnder sums the sizes of the objects at or under path.
func usageUnder(ctx context.Context, d storagedriver.StorageDriver, path string) (int64, error) {
	fi, err := d.Stat(ctx, path)
	if err != nil {
		var nf storagedriver.PathNotFoundError
		if errors.As(err, &nf) {
			return 0, nil
		}
		return 0, fmt.Errorf("storage usage: %w", err)
	}
	if !fi.IsDir() {
		return fi.Size(), nil
	}
	return walkSize(ctx, d, path)
}

// walkSize sums the sizes of the objects under the directory path.
func walkSize(ctx context.Context, d storagedriver.StorageDriver, path string) (int64, error) {
	var n int64
	err := d.Walk(ctx, path, func(fi storagedriver.FileInfo) error {
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
