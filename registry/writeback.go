package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"

	"github.com/ferrypkg/ferry/internal/atomicfile"
	"github.com/ferrypkg/ferry/internal/writeback"
)

// writebackMiddleware is the storage middleware (filesystem storage only)
// that keeps an upload's data flowing to the disk while it is received.
// distribution's filesystem driver fsyncs a blob when it commits it: with
// nothing written back before, the disk had the whole blob to write at
// that moment, and the upload waited for it with the processor idle.
const writebackMiddleware = "ferry-writeback"

func init() {
	if err := storagemiddleware.Register(writebackMiddleware, newWritebackDriver); err != nil {
		panic(err)
	}
}

func newWritebackDriver(_ context.Context, d storagedriver.StorageDriver, options map[string]any) (storagedriver.StorageDriver, error) {
	root, _ := options["rootdirectory"].(string)
	if root == "" {
		return nil, fmt.Errorf("%s: no rootdirectory", writebackMiddleware)
	}
	return &writebackDriver{StorageDriver: d, root: root}, nil
}

// writebackDriver is distribution's filesystem driver whose writers of
// upload data (the only large files it writes) start writing back as they go.
type writebackDriver struct {
	storagedriver.StorageDriver
	root string
}

func (d *writebackDriver) Writer(ctx context.Context, p string, append bool) (storagedriver.FileWriter, error) {
	fw, err := d.StorageDriver.Writer(ctx, p, append)
	if err != nil || path.Base(p) != "data" {
		return fw, err
	}
	return &writebackFile{FileWriter: fw, path: filepath.Join(d.root, filepath.FromSlash(p)), from: fw.Size()}, nil
}

// PutContent stores an upload session's hash state (what a chunked
// upload's next request goes on from) without fsync: distribution writes
// one each time an upload's request ends, the last just before the
// session is removed on commit, and with fsync each cost the disk's flush
// of everything other uploads had written. Such a file is worth nothing
// after a crash: a session whose state is lost or torn is refused, and
// the digest is checked at commit whatever the state said.
func (d *writebackDriver) PutContent(ctx context.Context, p string, content []byte) error {
	if !hashState(p) {
		return d.StorageDriver.PutContent(ctx, p, content)
	}
	full := filepath.Join(d.root, filepath.FromSlash(p))
	// distribution closes a cancelled upload again after removing it,
	// which stores its hash state once more: with the session gone (its
	// startedat, written first, removed with it) that would leave
	// _uploads/<id>/hashstates/... behind for every cancelled upload
	// until upload purging. Nothing can resume from it: not written.
	session := filepath.Dir(filepath.Dir(filepath.Dir(full)))
	if _, err := os.Stat(filepath.Join(session, "startedat")); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o777); err != nil {
		return err
	}
	_, err := atomicfile.Write(full, 0o644, func(w io.Writer) error {
		_, err := w.Write(content)
		return err
	})
	return err
}

// hashState reports whether p is an upload session's hash state:
// .../_uploads/<id>/hashstates/<algorithm>/<offset>.
func hashState(p string) bool {
	dir, _ := path.Split(p)
	dir = path.Dir(path.Dir(dir)) // .../_uploads/<id>/hashstates
	return path.Base(dir) == "hashstates" && path.Base(path.Dir(path.Dir(dir))) == "_uploads"
}

// writebackFile counts what the driver's writer takes and has it written
// back every writeback.Every bytes, through a second, read-only handle on
// the file (the driver keeps its own to itself), opened once that much is
// written: distribution resumes an upload for every request on it and
// does not close one it refuses for a stale state (its file is closed when
// the collector finds it), and a handle opened up front was a second file
// descriptor held so per such request.
type writebackFile struct {
	storagedriver.FileWriter
	path    string
	from    int64 // where this writer's first write landed
	written int64 // bytes written before wb
	f       *os.File
	wb      *writeback.Writer
	off     bool // the second handle could not be opened: advice only
}

func (w *writebackFile) Write(p []byte) (int, error) {
	n, err := w.FileWriter.Write(p)
	switch {
	case w.wb != nil:
		w.wb.Wrote(int64(n))
	case !w.off:
		w.written += int64(n)
		if w.written < writeback.Every {
			break
		}
		f, oerr := os.Open(w.path)
		if oerr != nil {
			w.off = true // the upload goes on without it
			break
		}
		w.f, w.wb = f, writeback.New(f, w.from)
		w.wb.Wrote(w.written)
	}
	return n, err
}

func (w *writebackFile) release() {
	if w.f != nil {
		_ = w.f.Close()
	}
}

func (w *writebackFile) Close() error {
	w.release()
	return w.FileWriter.Close()
}

func (w *writebackFile) Cancel(ctx context.Context) error {
	w.release()
	return w.FileWriter.Cancel(ctx)
}
