// Package confine is the one way ferry opens what a definition names
// (files, manifests, charts, OCI layouts, git repositories): inside the
// definition's folder and nowhere else, whatever a symbolic link, a `.git`
// file, a commondir or an alternates file says — the kernel refuses every
// escape (os.Root) — and only regular files and folders: a FIFO, a device
// or a socket is refused without blocking, so `/dev/zero` or a pipe
// someone placed in a layout costs nothing.
package confine

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// ErrEscapes is wrapped by errors for a name that leads outside the folder.
var ErrEscapes = errors.New("leads outside the definition's folder")

// ErrNotRegular is wrapped by errors for a name that is neither a regular
// file nor a folder (a FIFO, a device, a socket).
var ErrNotRegular = errors.New("is not a regular file")

// Open opens name (slash-separated, relative to root) for reading. It never
// blocks on a FIFO, and refuses anything but a regular file or a folder.
// Errors name name and wrap ErrEscapes or ErrNotRegular where they apply.
func Open(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	if name == "" {
		name = "."
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, Wrap(name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, Wrap(name, err)
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("%s %w (%s)", name, ErrNotRegular, TypeName(fi.Mode()))
	}
	return f, fi, nil
}

// OpenFile is Open for a regular file only.
func OpenFile(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, fi, err := Open(root, name)
	if err != nil {
		return nil, nil, err
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is a folder, not a file", name)
	}
	return f, fi, nil
}

// ErrTooLarge means a file holds more bytes than its reader allows.
var ErrTooLarge = errors.New("too large")

// ReadFile reads the regular file name, refusing one larger than max bytes
// (ErrTooLarge).
func ReadFile(root *os.Root, name string, max int64) ([]byte, error) {
	f, fi, err := OpenFile(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, fmt.Errorf("%s is %w: %d bytes, more than %d", name, ErrTooLarge, fi.Size(), max)
	}
	data, err := ReadAll(f, name, max)
	return data, Wrap(name, err)
}

// ReadPath reads the file at path, outside any root (a key or signature
// the user names), refusing more than max bytes (ErrTooLarge): /dev/zero
// or a planted huge file is not read whole.
func ReadPath(path string, max int64) ([]byte, error) {
	f, err := openPath(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, path, max)
}

// CheckPath checks, without reading it, that path is what ReadPath would
// read: a regular file of at most max bytes (where another library reads
// it, e.g. client-go a kubeconfig). A missing file is no error.
func CheckPath(path string, max int64) error {
	f, err := openPath(path, max)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// openPath opens path for reading without blocking (a FIFO nobody writes
// to) and refuses anything but a regular file of at most max bytes.
func openPath(path string, max int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, Wrap(path, err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = Wrap(path, err)
	case fi.IsDir():
		err = fmt.Errorf("%s is a folder, not a file", path)
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%s %w (%s)", path, ErrNotRegular, TypeName(fi.Mode()))
	case fi.Size() > max:
		err = fmt.Errorf("%s is %w: more than %d bytes", path, ErrTooLarge, max)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// TypeName says what a file that is not regular is: "a folder", "a named
// pipe", "a socket", "a device", "a symbolic link".
func TypeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a file: " + m.Type().String()
}

// ReadAll reads r, which name names in messages, to its end, refusing more
// than max bytes (ErrTooLarge) after reading at most max+1.
func ReadAll(r io.Reader, name string, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is %w: more than %d bytes", name, ErrTooLarge, max)
	}
	return data, nil
}

// Wrap turns an error of an os.Root (or os) operation on name into a
// sentence about name: one refused for leading outside the root wraps
// ErrEscapes; a *fs.PathError loses the system call it names ("openat",
// "statat": Go's words, not the user's) and says what is wrong with name
// ("x does not exist"), still wrapping its cause (errors.Is(err,
// fs.ErrNotExist) holds). Other errors are returned as they are.
func Wrap(name string, err error) error {
	if escapes(err) {
		return fmt.Errorf("%s %w", name, ErrEscapes)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &pathError{name: name, err: pe.Err}
	}
	return err
}

// pathError is a failed operation on a file, said of the file.
type pathError struct {
	name string
	err  error
}

func (e *pathError) Error() string {
	switch {
	case errors.Is(e.err, fs.ErrNotExist):
		return e.name + " does not exist"
	case errors.Is(e.err, fs.ErrPermission):
		return e.name + " may not be read (permission denied)"
	case errors.Is(e.err, syscall.ENOTDIR):
		return e.name + " does not exist: a part of its path is a file, not a folder"
	case errors.Is(e.err, syscall.ELOOP):
		return e.name + " is a loop of symbolic links"
	case errors.Is(e.err, syscall.EISDIR):
		return e.name + " is a folder, not a file"
	}
	return e.name + ": " + e.err.Error()
}

func (e *pathError) Unwrap() error { return e.err }

// escapes reports an os.Root refusal of a path that leaves the root: an
// absolute path, "..", or a symbolic link out. The os package exports no
// value for it, so its message is the test (one place).
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// FS is root as an fs.FS (fs.StatFS, fs.ReadDirFS) whose files are opened
// with Open: regular files and folders only, never outside root.
func FS(root *os.Root) fs.FS { return rootFS{root} }

type rootFS struct{ root *os.Root }

func (r rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, _, err := Open(r.root, name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (r rootFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	fi, err := r.root.Stat(name)
	return fi, Wrap(name, err)
}

func (r rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, fi, err := Open(r.root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a folder")}
	}
	return f.ReadDir(-1)
}

// Sub is the folder dir of root as its own *os.Root.
func Sub(root *os.Root, dir string) (*os.Root, error) {
	r, err := root.OpenRoot(path.Clean(dir))
	return r, Wrap(dir, err)
}

// MaxPEMSize bounds a PEM file a server is given (a certificate chain or
// a private key): 1 MiB.
const MaxPEMSize = 1 << 20

// LoadKeyPair is tls.LoadX509KeyPair with each file read as ReadPath reads
// it: a regular file of at most MaxPEMSize, opened without blocking.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := ReadPath(certFile, MaxPEMSize)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := ReadPath(keyFile, MaxPEMSize)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}
