package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/internal/writeback"
)

// File is a backup written to a file at path: into path.partial beside it,
// renamed to path once whole. What a rerun needs to go on is kept in
// path.resume.json until then.
func File(path string) Destination { return &fileDest{path: path} }

type fileDest struct{ path string }

// resumeState is what an interrupted write leaves for its rerun.
type resumeState struct {
	Root digest.Digest `json:"root"`
	Head head          `json:"head"`
	// S3 only: the multipart upload and its part size.
	UploadID string `json:"uploadId,omitempty"`
	PartSize int64  `json:"partSize,omitempty"`
}

// maxStateSize bounds a resume state read back (1 MiB).
const maxStateSize = 1 << 20

func (f *fileDest) String() string  { return f.path }
func (f *fileDest) partial() string { return f.path + ".partial" }
func (f *fileDest) state() string   { return f.path + ".resume.json" }

func (f *fileDest) resume(_ context.Context, rootOf func(*head) (digest.Digest, error)) (*head, int64, error) {
	data, err := readBounded(f.state(), maxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		_ = os.Remove(f.partial())
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var st resumeState
	fi, serr := os.Stat(f.partial())
	if json.Unmarshal(data, &st) != nil || serr != nil || !fi.Mode().IsRegular() {
		f.drop()
		return nil, 0, nil
	}
	root, err := rootOf(&st.Head)
	if err != nil || root != st.Root {
		f.drop() // ErrChanged: start over
		return nil, 0, nil
	}
	return &st.Head, fi.Size(), nil
}

func (f *fileDest) drop() {
	_ = os.Remove(f.partial())
	_ = os.Remove(f.state())
}

func (f *fileDest) write(_ context.Context, h *head, a *archive, start int64, body func(io.Writer, int64) error) error {
	if fi, err := os.Stat(f.path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a folder", f.path)
	}
	start = a.boundary(start)
	state, err := json.Marshal(resumeState{Root: a.root.Digest, Head: *h})
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.state(), state, 0o600); err != nil {
		return err
	}
	out, err := os.OpenFile(f.partial(), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		_ = os.Remove(f.state())
		return err
	}
	defer out.Close()
	if err := out.Truncate(start); err != nil {
		return err
	}
	if _, err := out.Seek(start, io.SeekStart); err != nil {
		return err
	}
	if err := body(writeback.New(out, start), start); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.partial(), f.path); err != nil {
		return err
	}
	_ = os.Remove(f.state())
	if d, err := os.Open(filepath.Dir(f.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// boundary is the end of the last entry that lies whole before n: where a
// rerun goes on writing.
func (a *archive) boundary(n int64) int64 {
	var b int64
	for _, e := range a.entries {
		if e.end() > n {
			break
		}
		b = e.end()
	}
	return b
}

// readBounded reads a regular file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is more than %d bytes", path, limit)
	}
	return data, nil
}
