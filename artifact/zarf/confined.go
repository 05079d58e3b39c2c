package zarf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
)

// Every file a zarf.yaml names is read through the ferry definition's
// folder (odir: for Import, the extracted package), opened as an os.Root
// by internal/confine: a link leading out of it is refused, a FIFO or a
// device refused without blocking, and a file read at most to a bound.

// errIsFolder is a folder named where a file is read.
var errIsFolder = errors.New("is a folder, not a file")

// open opens p (slash-separated, relative to odir) for reading: a regular
// file or a folder inside odir.
func (c *converter) open(p string) (*os.File, fs.FileInfo, error) {
	if c.root == nil {
		return nil, nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	f, fi, err := confine.Open(c.root, p)
	return f, fi, pathError(err)
}

// readFile reads the regular file p (relative to odir) of at most max
// bytes (confine.ErrTooLarge).
func (c *converter) readFile(p string, max int64) ([]byte, error) {
	f, fi, err := c.open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.IsDir() {
		return nil, fmt.Errorf("%s %w", p, errIsFolder)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s is %w: %d bytes, more than %d", p, confine.ErrTooLarge, fi.Size(), max)
	}
	data, err := confine.ReadAll(f, p, max)
	return data, pathError(err)
}

// fsys is odir as an fs.FS whose files are opened as open opens them,
// folders listed in the order of their names.
func (c *converter) fsys() fs.FS {
	if c.root == nil {
		return emptyFS{}
	}
	return sortedFS{confine.FS(c.root)}
}

// sortedFS lists folders sorted by name, as fs.ReadDirFS promises and
// fs.WalkDir relies on for its order.
type sortedFS struct{ fs.FS }

func (s sortedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(s.FS, name)
	slices.SortFunc(es, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return es, err
}

type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// display is the path of p (relative to odir) as gaps and messages name it.
func (c *converter) display(p string) string {
	return filepath.Join(c.odir, filepath.FromSlash(p))
}

// pathError is err without the system call a *fs.PathError names ("openat
// x: permission denied" is "x: permission denied"); others are returned
// as they are.
func pathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// plural is "1 file", "2 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// kustomizeFS is the file system kustomize reads a kustomization through:
// the disk's for names (links resolved, as kustomize's load restrictions
// want them), odir's root for every file read, so that nothing outside
// odir is read, a FIFO or a device is refused without blocking, and the
// files read for one zarf.yaml add up to at most
// artifact.MaxManifestBundleSize. It creates nothing.
type kustomizeFS struct {
	filesys.FileSystem
	root *os.Root
	dirs []string // odir, absolute, as given and with its links resolved
	read int64
}

func newKustomizeFS(root *os.Root, odir string) (*kustomizeFS, error) {
	if root == nil {
		return nil, fmt.Errorf("%s: %w", odir, fs.ErrNotExist)
	}
	abs, err := filepath.Abs(odir)
	if err != nil {
		return nil, err
	}
	dirs := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		dirs = append(dirs, real)
	}
	return &kustomizeFS{FileSystem: filesys.MakeFsOnDisk(), root: root, dirs: dirs}, nil
}

// rel is name relative to odir, or an error wrapping confine.ErrEscapes.
func (k *kustomizeFS) rel(name string) (string, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", err
	}
	for _, d := range k.dirs {
		if r, err := filepath.Rel(d, abs); err == nil && filepath.IsLocal(r) {
			return filepath.ToSlash(r), nil
		} else if err == nil && r == "." {
			return ".", nil
		}
	}
	return "", fmt.Errorf("%s %w", name, confine.ErrEscapes)
}

func (k *kustomizeFS) ReadFile(name string) ([]byte, error) {
	r, err := k.rel(name)
	if err != nil {
		return nil, err
	}
	data, err := confine.ReadFile(k.root, r, artifact.MaxManifestBundleSize-k.read)
	if errors.Is(err, confine.ErrTooLarge) {
		return nil, fmt.Errorf("%s: the files kustomize reads add up to more than %s bytes", r, count(artifact.MaxManifestBundleSize))
	}
	k.read += int64(len(data))
	return data, pathError(err)
}

func (k *kustomizeFS) Open(name string) (filesys.File, error) {
	r, err := k.rel(name)
	if err != nil {
		return nil, err
	}
	f, _, err := confine.OpenFile(k.root, r)
	if err != nil {
		return nil, pathError(err)
	}
	return f, nil
}

func (k *kustomizeFS) IsDir(name string) bool {
	_, err := k.rel(name)
	return err == nil && k.FileSystem.IsDir(name)
}

func (k *kustomizeFS) Exists(name string) bool {
	_, err := k.rel(name)
	return err == nil && k.FileSystem.Exists(name)
}

func (k *kustomizeFS) ReadDir(name string) ([]string, error) {
	if _, err := k.rel(name); err != nil {
		return nil, err
	}
	return k.FileSystem.ReadDir(name)
}

func (k *kustomizeFS) Walk(name string, fn filepath.WalkFunc) error {
	if _, err := k.rel(name); err != nil {
		return err
	}
	return k.FileSystem.Walk(name, fn)
}

var errNoWrite = errors.New("kustomize build writes nothing here")

func (k *kustomizeFS) Create(string) (filesys.File, error) { return nil, errNoWrite }
func (k *kustomizeFS) Mkdir(string) error                  { return errNoWrite }
func (k *kustomizeFS) MkdirAll(string) error               { return errNoWrite }
func (k *kustomizeFS) WriteFile(string, []byte) error      { return errNoWrite }
