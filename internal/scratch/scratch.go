// Package scratch makes the temporary files and folders ferry works in, and
// removes those that earlier runs left behind: every one is locked (flock)
// for as long as the process that made it lives, so a process killed
// outright (SIGKILL, a crash, a power loss) leaves one that nobody holds,
// and the next process to make one in the same folder removes it. A live
// process's are never touched.
//
// Every name ends in Suffix, so that the sweep never touches another
// program's files.
package scratch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Suffix ends the name of every file and folder made here.
const Suffix = ".ferrytmp"

// Dir is a temporary folder held by this process.
type Dir struct {
	// Path is the folder.
	Path string
	lock *os.File
}

// MkdirTemp makes a new folder in parent (os.TempDir() if empty) named
// prefix, random characters and Suffix, locked until Remove. It first
// removes the folders and files of that form in parent that no live process
// holds.
func MkdirTemp(parent, prefix string) (*Dir, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	Sweep(parent)
	for range 8 {
		path, err := os.MkdirTemp(parent, prefix+"*"+Suffix)
		if err != nil {
			return nil, err
		}
		f, err := lockPath(path)
		if err == nil {
			return &Dir{Path: path, lock: f}, nil
		}
		// Another process's sweep locked it in the instant between the two
		// (and removes it): make another.
	}
	return nil, fmt.Errorf("cannot lock a temporary folder in %s", parent)
}

// Remove removes the folder and everything in it, then releases it.
func (d *Dir) Remove() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := os.RemoveAll(d.Path)
	d.lock.Close()
	d.lock = nil
	return err
}

// CreateTemp creates a new file in dir (os.TempDir() if empty) named
// pattern (a "*" in it is replaced by random characters) and Suffix,
// opened for reading and writing and locked until it is closed; the caller
// removes it. It first removes the stale files and folders of that form in
// dir, as MkdirTemp does.
func CreateTemp(dir, pattern string) (*os.File, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if !strings.Contains(pattern, "*") {
		pattern += "*"
	}
	Sweep(dir)
	for range 8 {
		f, err := os.CreateTemp(dir, pattern+Suffix)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("cannot lock a temporary file in %s", dir)
}

// Sweep removes the files and folders in dir whose names end in Suffix and
// that no live process holds. Failures are ignored: what is left is only
// disk space, and the next sweep tries again.
func Sweep(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "*"+Suffix))
	for _, name := range names {
		f, err := lockPath(name)
		if err != nil {
			continue
		}
		held, err1 := f.Stat()
		now, err2 := os.Lstat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			if held.IsDir() {
				os.RemoveAll(name)
			} else if held.Mode().IsRegular() {
				os.Remove(name)
			}
		}
		f.Close()
	}
}

// errHeld: someone else holds the lock.
var errHeld = errors.New("held by a live process")

// lockPath opens path (never through a symbolic link) and takes its lock
// without waiting.
func lockPath(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, errHeld
	}
	return f, nil
}
