package registry

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// Upload sessions live under <repository>/_uploads/<id>/ until the closing
// PUT moves their data to the blob store. A writer that dies mid-upload (a
// killed `ferry registry load`, a client that gave up) leaves its session
// there: the data so far, its start time and its hash states. Three things
// remove abandoned sessions:
//
//   - every serving registry runs distribution's upload purger
//     (storage.maintenance.uploadpurging) every UploadPurgeInterval, removing
//     sessions started more than UploadPurgeAge ago;
//   - GarbageCollect removes, while the storage is read-only, every session
//     not written to since it entered read-only mode (none can be meanwhile);
//   - mirror loading (`ferry registry load`) removes, when it ends, every
//     session not written to since it started: the sessions of an earlier
//     load that was killed, and of any writer that has been idle as long.
//
// PurgeUploads does the last two. It judges a session by its newest file,
// not by its start: a long upload that is still being written to is kept.

// Defaults of the upload purger that serving registries run.
const (
	// UploadPurgeAge is how long after it started an upload session is
	// purged by a serving registry (24 h: no push takes a day).
	UploadPurgeAge = 24 * time.Hour
	// UploadPurgeInterval is how often a serving registry purges (1 h; the
	// first purge comes at a random time within its first hour).
	UploadPurgeInterval = time.Hour
)

// PurgeResult tells what PurgeUploads removed.
type PurgeResult struct {
	// Sessions is the number of upload sessions removed, Bytes the bytes
	// of their files.
	Sessions int   `json:"sessions"`
	Bytes    int64 `json:"bytes"`
}

// PurgeUploads removes from cfg's storage (filesystem or S3) every upload
// session in which nothing was written since idleSince: its folder and, on
// S3, the multipart upload that holds its data. Sessions a writer still
// writes to are kept, whatever their age. It may run while registries serve
// the storage; on S3, the data a client is streaming within one request is
// not visible until the request ends, so a session whose client streams one
// request from before idleSince to after the purge is removed too.
func PurgeUploads(ctx context.Context, cfg Config, idleSince time.Time) (PurgeResult, error) {
	defer quietLogs()()
	name := "purge uploads of " + cfg.storageName()
	if cfg.RootDir == "" && cfg.S3 == nil {
		return PurgeResult{}, fmt.Errorf("%s: in-memory storage is not shared", name)
	}
	if err := cfg.validate(); err != nil {
		return PurgeResult{}, err
	}
	d, err := cfg.openDriver(ctx) // a storage with nothing in it has nothing to purge
	if err != nil {
		return PurgeResult{}, err
	}
	res, err := purgeUploads(ctx, d, idleSince)
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// uploadSession is what a walk learns of one session.
type uploadSession struct {
	newest  time.Time
	bytes   int64
	hasData bool // a data object was seen (not on S3 before the upload ends)
}

func purgeUploads(ctx context.Context, d storagedriver.StorageDriver, idleSince time.Time) (PurgeResult, error) {
	var res PurgeResult
	sessions := map[string]*uploadSession{}
	const marker = "/_uploads/"
	err := d.Walk(ctx, repositoriesDir, func(fi storagedriver.FileInfo) error {
		p := fi.Path()
		i := strings.Index(p, marker)
		if i < 0 {
			// A repository's own folders other than _uploads hold no
			// sessions.
			if fi.IsDir() && strings.HasPrefix(path.Base(p), "_") && path.Base(p) != "_uploads" {
				return storagedriver.ErrSkipDir
			}
			return nil
		}
		id, _, _ := strings.Cut(p[i+len(marker):], "/")
		if id == "" {
			return nil
		}
		dir := p[:i+len(marker)] + id
		s := sessions[dir]
		if s == nil {
			s = &uploadSession{}
			sessions[dir] = s
		}
		if mt := fi.ModTime(); mt.After(s.newest) {
			s.newest = mt
		}
		if !fi.IsDir() {
			s.bytes += fi.Size()
			s.hasData = s.hasData || p == dir+"/data"
		}
		return nil
	})
	if err != nil && !notFound(err) {
		return res, err
	}
	for dir, s := range sessions {
		if !s.newest.Before(idleSince) {
			continue
		}
		// On S3 the data being uploaded is a multipart upload, which
		// deleting the folder's objects leaves behind: abort it (the
		// writer of an append finds it). Elsewhere there is none.
		if w, err := d.Writer(ctx, dir+"/data", true); err == nil {
			if !s.hasData {
				s.bytes += w.Size()
			}
			_ = w.Cancel(ctx)
		}
		if err := d.Delete(ctx, dir); err != nil && !notFound(err) {
			return res, err
		}
		res.Sessions++
		res.Bytes += s.bytes
	}
	return res, nil
}
