// Package atomicfile writes files whole or not at all: through a locked
// temporary file beside the target, renamed into place, with the temporary
// files of writers that died removed by the next write.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferrypkg/ferry/internal/diskspace"
)

// Write writes path with the given mode through a temporary file in the
// same folder and renames it into place only when write succeeded; it
// returns the size. Nothing is ever left half-written at path. A write
// that fills the file system fails with a *diskspace.FullError naming path
// and the room left once the temporary file is removed.
//
// It does not fsync: an interrupted write leaves no file at path, and a
// package damaged by a power loss cannot pass unnoticed, since every read
// verifies every blob against its digest. Waiting for the disk would make
// create disk-bound instead of hash-and-compress-bound.
//
// The temporary file (.NAME.tmp-NNN beside path) is locked (flock) for as
// long as it exists under that name. A process killed while writing (even
// by SIGKILL) loses its lock, so the next write of the same path removes
// such stale files: those it can lock are no one's. A live writer's are
// left alone.
func Write(path string, mode os.FileMode, write func(io.Writer) error) (size int64, err error) {
	size, err = write1(path, mode, write)
	if err != nil && diskspace.IsFull(err) {
		return 0, diskspace.Explain(path, size, err)
	}
	if err != nil {
		size = 0
	}
	var pe *os.PathError
	if errors.As(err, &pe) && strings.Contains(filepath.Base(pe.Path), ".tmp-") {
		// Name the file the user asked for, not the temporary one.
		err = fmt.Errorf("write %s: %w", path, pe.Err)
	}
	return size, err
}

func write1(path string, mode os.FileMode, write func(io.Writer) error) (size int64, err error) {
	// A rename would replace a device, a pipe or a folder (as root,
	// `-o /dev/stdout` swapped the device for a regular file).
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s exists and is not a regular file", path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	pattern := "." + base + ".tmp-*"
	removeStaleTemps(filepath.Join(dir, pattern))
	tmp, err := lockedTemp(dir, pattern)
	if err != nil {
		return 0, err
	}
	// Closing releases the lock: the file is closed (its last handle) only
	// once renamed, or after it is removed.
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
		tmp.Close()
	}()
	cw := &countWriter{w: tmp}
	if err = write(cw); err != nil {
		return cw.n, err // the count, for the caller's error only
	}
	if err = tmp.Chmod(mode); err != nil {
		return 0, err
	}
	// Close before the rename, so that an error only a close reports (a
	// network or FUSE file system's late write error) leaves nothing at
	// path; a second handle on the same open file keeps the lock until
	// the rename is done.
	held, err := dupFile(tmp)
	if err != nil {
		return 0, err
	}
	defer held.Close()
	name := tmp.Name()
	if err = tmp.Close(); err != nil {
		return 0, err
	}
	if err = os.Rename(name, path); err != nil {
		return 0, err
	}
	return cw.n, nil
}

// dupFile is a second handle on f's open file (dup(2)): flock's lock stays
// while either is open.
func dupFile(f *os.File) (*os.File, error) {
	c, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := c.Control(func(p uintptr) { fd, derr = syscall.Dup(int(p)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// lockedTemp creates a temporary file in dir and takes its lock. Another
// process's removeStaleTemps may lock it first, in the instant between the
// two: then the file is left to it and another is made.
func lockedTemp(dir, pattern string) (*os.File, error) {
	for range 8 {
		tmp, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(tmp.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return tmp, nil
		}
		tmp.Close()
	}
	return nil, fmt.Errorf("cannot lock a temporary file in %s", dir)
}

// removeStaleTemps removes the temporary files matching glob that no live
// writer holds: regular files (not links) it can lock, and that are still
// the file of that name once locked. Failures are ignored: a stale file
// left is only disk space, and the next write tries again.
func removeStaleTemps(glob string) {
	names, _ := filepath.Glob(glob)
	for _, name := range names {
		f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			held, err1 := f.Stat()
			now, err2 := os.Lstat(name)
			if err1 == nil && err2 == nil && held.Mode().IsRegular() && os.SameFile(held, now) {
				os.Remove(name)
			}
		}
		f.Close()
	}
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
