package backup

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// span is where a blob's bytes lie whole in a backup file.
type span struct {
	digest    digest.Digest
	off, size int64
}

// scanBlobs lists the blob entries of the backup file f that want names,
// in stored order, with where their bytes lie. Nothing but the tar headers
// is read: archive/tar seeks past each entry's data (reading its last byte,
// so a truncated file is found here). An entry that is not a plain file or
// folder, or a blob entry not named by a sha256 digest, is ErrCorrupt.
func scanBlobs(f *os.File, want func(digest.Digest) bool) ([]span, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	tr := tar.NewReader(f)
	var out []span
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: archive is truncated", artifact.ErrCorrupt)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", artifact.ErrCorrupt, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("%w: unexpected entry %.80q", artifact.ErrCorrupt, h.Name)
		}
		rest, ok := strings.CutPrefix(h.Name, "blobs/sha256/")
		if !ok {
			continue // the head: ferry.json, oci-layout, index.json, ferry-delta.json
		}
		d := digest.NewDigestFromEncoded(digest.SHA256, rest)
		if d.Validate() != nil {
			return nil, fmt.Errorf("%w: entry %.80q is not named by a sha256 digest", artifact.ErrCorrupt, h.Name)
		}
		if !want(d) {
			continue
		}
		// archive/tar reads a header and nothing past it: the file is at
		// the entry's first byte.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		out = append(out, span{digest: d, off: off, size: h.Size})
	}
}

// fileSpan is n bytes of f from off, as a request body: read, or sent
// from the file by the kernel when the HTTP client's connection lets it
// (zerocopy.Sender; artifact.RemoteOptions' clients do, over plain TCP).
// Its bytes are not hashed here: the registry commits them under their
// digest and refuses others (see refusedDigest).
type fileSpan struct {
	f      *os.File
	off, n int64 // what is left to send
}

var _ zerocopy.Sender = (*fileSpan)(nil)

func (s *fileSpan) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.n {
		p = p[:s.n]
	}
	k, err := s.f.ReadAt(p, s.off)
	s.off += int64(k)
	s.n -= int64(k)
	if err == io.EOF && k == len(p) {
		err = nil
	} else if err == io.EOF {
		err = io.ErrUnexpectedEOF // the file is shorter than when it was scanned
	}
	return k, err
}

// Close does nothing: net/http hands a ReadCloser body to the connection
// as it is, and the file is the restore's to close.
func (s *fileSpan) Close() error { return nil }

func (s *fileSpan) SendTo(c *net.TCPConn, limit int64) (int64, error) {
	n := s.n
	if limit >= 0 {
		n = min(n, limit)
	}
	k, err := zerocopy.SendFile(c, s.f, s.off, n)
	s.off += k
	s.n -= k
	return k, err
}

// refusedDigest reports whether a registry refused an upload because its
// bytes do not match the digest it was to be committed under.
func refusedDigest(err error) bool {
	var er *errcode.ErrorResponse
	if !errors.As(err, &er) {
		return false
	}
	for _, e := range er.Errors {
		if e.Code == errcode.ErrorCodeDigestInvalid || e.Code == errcode.ErrorCodeSizeInvalid {
			return true
		}
	}
	return false
}
