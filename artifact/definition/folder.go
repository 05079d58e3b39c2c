package definition

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/ferrypkg/ferry/internal/confine"
)

// Folder is a definition's folder, opened: create reads every file,
// manifest, chart, OCI layout and local git repository a definition names
// through it, and nowhere else. Whatever a name leads to — a symbolic link,
// a `.git` file's gitdir, a blob of a layout that is a link — is resolved
// inside the folder or refused (os.Root, package internal/confine), and
// only regular files and folders are read: a FIFO or a device is refused
// without blocking.
type Folder struct {
	root *os.Root
}

// OpenFolder opens the definition's folder. The caller closes it.
func (d *Definition) OpenFolder() (*Folder, error) {
	dir, err := filepath.Abs(d.Dir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("definition folder: %w", err)
	}
	return &Folder{root: root}, nil
}

// Close closes the folder.
func (f *Folder) Close() error { return f.root.Close() }

// Root is the folder as an *os.Root, for readers that take one (gitrepo).
func (f *Folder) Root() *os.Root { return f.root }

// name is rel, a path the definition names, checked and slash-separated.
func (f *Folder) CleanPath(rel string) (string, error) {
	if err := checkRelPath(rel); err != nil {
		return "", err
	}
	return path.Clean(filepath.ToSlash(rel)), nil
}

// Stat describes rel, links followed inside the folder.
func (f *Folder) Stat(rel string) (fs.FileInfo, error) {
	n, err := f.CleanPath(rel)
	if err != nil {
		return nil, err
	}
	return fs.Stat(confine.FS(f.root), n)
}

// Open opens the regular file rel.
func (f *Folder) Open(rel string) (*os.File, fs.FileInfo, error) {
	n, err := f.CleanPath(rel)
	if err != nil {
		return nil, nil, err
	}
	return confine.OpenFile(f.root, n)
}

// ReadFile reads the regular file rel, at most max bytes.
func (f *Folder) ReadFile(rel string, max int64) ([]byte, error) {
	n, err := f.CleanPath(rel)
	if err != nil {
		return nil, err
	}
	return confine.ReadFile(f.root, n, max)
}

// FS is the folder as an fs.FS whose names are slash-separated paths inside
// it (a definition's paths through filepath.ToSlash).
func (f *Folder) FS() fs.FS { return confine.FS(f.root) }

// Sub is the sub-folder rel as an fs.FS, for stores that read a folder (an
// OCI layout).
func (f *Folder) Sub(rel string) (fs.FS, error) {
	n, err := f.CleanPath(rel)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", rel)
	}
	return fs.Sub(confine.FS(f.root), n)
}
