package gitrepo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-billy/v5"

	"github.com/ferrypkg/ferry/internal/confine"
)

// rootFS is a read-only billy.Filesystem over an *os.Root: go-git reads a
// repository through it, and whatever a repository names — a `.git` file's
// gitdir, a commondir, alternates, a symbolic link among its files — is
// resolved inside the root or refused by the kernel (os.Root), never read
// outside it. dir is the folder, inside the root, that this view is
// chrooted to ("" for the root itself).
type rootFS struct {
	root *os.Root
	dir  string
}

var _ billy.Filesystem = rootFS{}

// errReadOnly: a repository read for a package is never written.
var errReadOnly = errors.New("read-only: a repository read for a package is never changed")

// rel is name inside the root: relative to the view's dir, an absolute
// name taken from the view's top (as billy's chroot does), cleaned.
func (f rootFS) rel(name string) string {
	p := path.Clean("/" + name)
	return strings.TrimPrefix(path.Join("/"+f.dir, p), "/")
}

func (f rootFS) name(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func (f rootFS) Open(name string) (billy.File, error) {
	return f.OpenFile(name, os.O_RDONLY, 0)
}

func (f rootFS) OpenFile(name string, flag int, _ os.FileMode) (billy.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_APPEND|os.O_TRUNC) != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errReadOnly}
	}
	file, _, err := confine.Open(f.root, f.name(f.rel(name)))
	if err != nil {
		return nil, err
	}
	return rootFile{File: file, name: name}, nil
}

func (f rootFS) Create(name string) (billy.File, error) {
	return nil, &fs.PathError{Op: "create", Path: name, Err: errReadOnly}
}

func (f rootFS) Stat(name string) (os.FileInfo, error) {
	n := f.name(f.rel(name))
	fi, err := f.root.Stat(n)
	return fi, confine.Wrap(n, err)
}

func (f rootFS) Lstat(name string) (os.FileInfo, error) {
	n := f.name(f.rel(name))
	fi, err := f.root.Lstat(n)
	return fi, confine.Wrap(n, err)
}

func (f rootFS) Readlink(name string) (string, error) {
	n := f.name(f.rel(name))
	target, err := f.root.Readlink(n)
	return target, confine.Wrap(n, err)
}

func (f rootFS) ReadDir(name string) ([]os.FileInfo, error) {
	d, _, err := confine.Open(f.root, f.name(f.rel(name)))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	infos := make([]os.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		infos = append(infos, fi)
	}
	return infos, nil
}

func (f rootFS) Rename(from, _ string) error {
	return &fs.PathError{Op: "rename", Path: from, Err: errReadOnly}
}

func (f rootFS) Remove(name string) error {
	return &fs.PathError{Op: "remove", Path: name, Err: errReadOnly}
}

func (f rootFS) MkdirAll(name string, _ os.FileMode) error {
	return &fs.PathError{Op: "mkdir", Path: name, Err: errReadOnly}
}

func (f rootFS) Symlink(_, link string) error {
	return &fs.PathError{Op: "symlink", Path: link, Err: errReadOnly}
}

func (f rootFS) TempFile(dir, _ string) (billy.File, error) {
	return nil, &fs.PathError{Op: "tempfile", Path: dir, Err: errReadOnly}
}

func (f rootFS) Join(elem ...string) string { return path.Join(elem...) }

// Chroot is a view of the folder name inside this one; it must be a folder
// inside the root.
func (f rootFS) Chroot(name string) (billy.Filesystem, error) {
	rel := f.rel(name)
	fi, err := f.root.Stat(f.name(rel))
	if err != nil {
		return nil, confine.Wrap(f.name(rel), err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", name)
	}
	return rootFS{root: f.root, dir: rel}, nil
}

// Root is the view's folder, relative to the root, "/"-prefixed.
func (f rootFS) Root() string { return "/" + f.dir }

// Capabilities: reading and seeking only.
func (f rootFS) Capabilities() billy.Capability {
	return billy.ReadCapability | billy.SeekCapability
}

// rootFile is an *os.File opened read-only through the root.
type rootFile struct {
	*os.File
	name string
}

func (f rootFile) Name() string { return f.name }
func (f rootFile) Lock() error  { return nil }
func (f rootFile) Unlock() error {
	return nil
}
func (f rootFile) Truncate(int64) error {
	return &fs.PathError{Op: "truncate", Path: f.name, Err: errReadOnly}
}
func (f rootFile) Write([]byte) (int, error) {
	return 0, &fs.PathError{Op: "write", Path: f.name, Err: errReadOnly}
}
