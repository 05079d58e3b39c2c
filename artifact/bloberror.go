package artifact

import (
	"fmt"
	"strings"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/internal/unreachable"
)

// BlobError is an error about one blob (or manifest) of a package: the
// operation (Op: "check blob", "upload blob", "check manifest", "push
// manifest", "fetch", "blob" for its content), the blob's digest, and the
// cause, wrapped: errors.Is(err, ErrCorrupt) or errdef.ErrNotFound still
// match, and errors.As gives the digest, as oras-go's CopyError does for a
// copy.
type BlobError = corrupt.BlobError

// errDigestMismatch is the cause of a BlobError for content that does not
// hash to its digest.
var errDigestMismatch = corrupt.ErrDigestMismatch

// refError is an error about a reference whose cause already names it, as
// oras-go's do ("R: not found"): its message names the reference once.
type refError struct {
	msg string
	err error
}

func (e *refError) Error() string { return e.msg }
func (e *refError) Unwrap() error { return e.err }

// WithRef wraps err, the cause of op on ref, naming ref once: "resolve R:
// not found", not "resolve R: R: not found".
func WithRef(op, ref string, err error) error {
	if unreachable.Of(err) != nil {
		return withCause(op, ref, err)
	}
	if rest, ok := strings.CutPrefix(err.Error(), ref+": "); ok {
		return &refError{msg: op + " " + ref + ": " + rest, err: err}
	}
	return fmt.Errorf("%s %s: %w", op, ref, err)
}
