package inject

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
)

// Payload is the registry image as the injector receives it: a tar of an
// OCI image layout and its sha256.
type Payload struct {
	Data   []byte
	Digest digest.Digest
}

// ErrInvalidLayout is wrapped by NewPayload's errors about its input.
var ErrInvalidLayout = errors.New("invalid OCI layout")

// NewPayload tars the OCI image layout in fsys (as os.DirFS(dir) gives it)
// reproducibly: oci-layout and index.json first, then every other entry in
// lexical order, with fixed mode, owner and time. It verifies every blob
// under blobs/sha256/ against its name and refuses anything but regular
// files and directories.
func NewPayload(fsys fs.FS) (Payload, error) {
	for _, name := range []string{"oci-layout", "index.json"} {
		if fi, err := fs.Stat(fsys, name); err != nil || !fi.Mode().IsRegular() {
			return Payload{}, fmt.Errorf("%w: %s is missing", ErrInvalidLayout, name)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	add := func(name string, d fs.DirEntry) error {
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file or directory", ErrInvalidLayout, name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != hexDigest {
				return fmt.Errorf("%w: blob sha256:%s: content has sha256:%x", ErrInvalidLayout, hexDigest, sum)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(b)), Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	for _, name := range []string{"oci-layout", "index.json"} {
		fi, _ := fs.Stat(fsys, name)
		if err := add(name, fs.FileInfoToDirEntry(fi)); err != nil {
			return Payload{}, err
		}
	}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." || name == "oci-layout" || name == "index.json" || path.Base(name) == ".DS_Store" {
			return nil
		}
		return add(name, d)
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return Payload{}, fmt.Errorf("payload: %w", err)
	}
	return Payload{Data: buf.Bytes(), Digest: digest.FromBytes(buf.Bytes())}, nil
}

// WriteTo writes the payload tar to w.
func (p Payload) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(p.Data)
	return int64(n), err
}
