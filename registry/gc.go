package registry

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/distribution/distribution/v3/registry/storage"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

// GCResult tells what a garbage collection freed.
type GCResult struct {
	// Before and After are the bytes of the storage's files.
	Before int64 `json:"before"`
	After  int64 `json:"after"`
}

// GarbageCollect deletes from the filesystem storage at root every blob that
// no manifest of any repository references any more (distribution's mark
// and sweep). Manifests deleted through the API are then gone for good;
// untagged manifests are kept (referrers are untagged). A running registry
// on the same storage keeps blob descriptors and referrers in memory:
// restart it afterwards.
func GarbageCollect(ctx context.Context, root string) (GCResult, error) {
	var res GCResult
	if _, err := os.Stat(filepath.Join(root, "docker")); err != nil {
		return res, fmt.Errorf("garbage collect %s: no registry storage: %w", root, err)
	}
	var err error
	if res.Before, err = diskUsage(root); err != nil {
		return res, err
	}
	d := filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 100})
	ns, err := storage.NewRegistry(ctx, d, storage.EnableDelete)
	if err != nil {
		return res, fmt.Errorf("garbage collect %s: %w", root, err)
	}
	if err := storage.MarkAndSweep(ctx, d, ns, storage.GCOpts{Quiet: true}); err != nil {
		return res, fmt.Errorf("garbage collect %s: %w", root, err)
	}
	res.After, err = diskUsage(root)
	return res, err
}

// diskUsage sums the sizes of the regular files under root.
func diskUsage(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("disk usage of %s: %w", root, err)
	}
	return n, nil
}
