package artifact

import (
	"fmt"

	"github.com/ferrypkg/ferry/internal/unreachable"
)

// UnreachableError is a registry ferry could not connect to at all (the
// connection refused, no route, no such host), said as a sentence about
// it: "127.0.0.1:1 cannot be reached: connection refused".
type UnreachableError = unreachable.Error

// withCause wraps err, the cause of op on ref: a registry that could not
// be reached is said once, without the steps that led to it ("push R:
// H cannot be reached: connection refused", not "push R: check manifest
// D: fetch D: Get …: …").
func withCause(op, ref string, err error) error {
	return fmt.Errorf("%s %s: %w", op, ref, unreachable.Said(err))
}
