// Package corrupt holds what a damaged package is, for the packages of
// artifact that read one: the sentinel (artifact.ErrCorrupt is Err), the
// error about one blob (artifact.BlobError is BlobError), and the wrapping
// that says "package is corrupt" once.
package corrupt

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
)

// Err means the package is damaged or tampered with.
var Err = errors.New("package is corrupt")

// BlobError is an error about one blob (or manifest) of a package: the
// operation (Op: "check blob", "upload blob", "check manifest", "push
// manifest", "fetch", "blob" for its content), the blob's digest, and the
// cause, wrapped: errors.Is(err, Err) or errdef.ErrNotFound still match,
// and errors.As gives the digest, as oras-go's CopyError does for a copy.
type BlobError struct {
	Op     string
	Digest digest.Digest
	Err    error
}

var _ error = (*BlobError)(nil)

func (e *BlobError) Error() string {
	if e.Err == ErrDigestMismatch {
		return fmt.Sprintf("%v: blob %s does not match its digest", Err, e.Digest)
	}
	return fmt.Sprintf("%s %s: %v", e.Op, e.Digest, e.Err)
}

func (e *BlobError) Unwrap() error { return e.Err }

// ErrDigestMismatch is the cause of a BlobError for content that does not
// hash to its digest.
var ErrDigestMismatch = fmt.Errorf("%w: does not match its digest", Err)

// Blob is the error for the blob d whose content does not hash to d.
func Blob(d digest.Digest) *BlobError {
	return &BlobError{Op: "blob", Digest: d, Err: ErrDigestMismatch}
}

// IsBlob reports whether err is a Blob error, and returns it.
func IsBlob(err error) (*BlobError, bool) {
	var be *BlobError
	ok := errors.As(err, &be) && be.Err == ErrDigestMismatch
	return be, ok
}

// In wraps err, a failure reading what (a part of the package, or "" for
// the package itself), in Err — once: an err that already is one gets only
// the context, so that no message says "package is corrupt" twice.
func In(what string, err error) error {
	switch {
	case errors.Is(err, Err) && what == "":
		return err
	case errors.Is(err, Err):
		return fmt.Errorf("%s: %w", what, err)
	case what == "":
		return fmt.Errorf("%w: %w", Err, err)
	}
	return fmt.Errorf("%w: %s: %w", Err, what, err)
}

// SomeOf lists the first few of things a damaged package lacks, and how
// many more there are: an error naming what a hostile ferry.json lists
// stays one short line.
func SomeOf(things []string) string {
	const few = 5
	if len(things) <= few {
		return strings.Join(things, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(things[:few], ", "), len(things)-few)
}
