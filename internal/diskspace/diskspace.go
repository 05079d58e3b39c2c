// Package diskspace says how full a file system is, and turns a write that
// found it full (ENOSPC, EDQUOT) into one error that names the file and the
// file system's free space: what every writer of ferry's (archives, parts,
// deltas, layouts, the registry's storage) reports instead of "no space left
// on device" from deep inside a tar or zstd writer.
package diskspace

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Usage is the room on one file system, in bytes.
type Usage struct {
	// Free is what an unprivileged writer may still use (statfs's f_bavail).
	Free int64
	// Total is the file system's size.
	Total int64
}

// Of returns the usage of the file system holding path. A path that does
// not exist yet is measured at its nearest existing parent folder.
func Of(path string) (Usage, error) {
	var st unix.Statfs_t
	p := path
	for {
		err := unix.Statfs(p, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) || parent == p {
			return Usage{}, fmt.Errorf("free space of %s: %w", path, err)
		}
		p = parent
	}
	return usage(&st), nil
}

// usage is st's room in bytes: block counts times the block size, held to
// [0, MaxInt64] (a file system may say "unlimited" as 2^64-1 blocks).
func usage(st *unix.Statfs_t) Usage {
	bs := int64(st.Bsize)                                                                     //nolint:unconvert // int32 on some platforms
	return Usage{Free: bytesOf(uint64(st.Bavail), bs), Total: bytesOf(uint64(st.Blocks), bs)} //nolint:unconvert // int64 on some platforms
}

func bytesOf(blocks uint64, bs int64) int64 {
	if bs <= 0 {
		return 0
	}
	if blocks > uint64(math.MaxInt64/bs) {
		return math.MaxInt64
	}
	return int64(blocks) * bs
}

// IsFull reports whether err is, or wraps, a write refused for want of
// room: ENOSPC, EDQUOT, or a *FullError.
func IsFull(err error) bool {
	var fe *FullError
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.As(err, &fe)
}

// FullError is a write that found its file system full. Its message is one
// line: the file, what was refused or removed, and the room left.
type FullError struct {
	// Path is the file that was being written (the one asked for, not a
	// temporary beside it).
	Path string
	// Usage is the file system's room after the failed write was cleaned
	// up; zero when it could not be measured.
	Usage Usage
	// Removed is how many bytes of the failed write were removed again (0:
	// none or not known).
	Removed int64
	// Err is the error the write met (ENOSPC, EDQUOT).
	Err error
}

func (e *FullError) Error() string {
	msg := fmt.Sprintf("write %s: file system full", e.Path)
	if e.Usage.Total > 0 {
		msg += fmt.Sprintf(" (%s free of %s", Bytes(e.Usage.Free), Bytes(e.Usage.Total))
		if e.Removed > 0 {
			msg += fmt.Sprintf("; the %s written were removed", Bytes(e.Removed))
		}
		msg += ")"
	}
	return msg
}

func (e *FullError) Unwrap() error { return e.Err }

// Explain returns err as a *FullError naming path, with the free space of
// path's file system measured now, when err is a full file system's
// (IsFull); any other error (and nil) it returns unchanged. removed is how
// many bytes of the failed write were removed (0 if unknown). A *FullError
// already in err is kept as it is.
func Explain(path string, removed int64, err error) error {
	if err == nil || !IsFull(err) {
		return err
	}
	var fe *FullError
	if errors.As(err, &fe) {
		return err
	}
	u, _ := Of(filepath.Dir(path))
	return &FullError{Path: path, Usage: u, Removed: removed, Err: err}
}

// Bytes formats n with a binary unit, as ferry's other sizes are shown
// ("3.1 MiB").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
