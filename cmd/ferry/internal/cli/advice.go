package cli

import (
	"errors"
	"fmt"

	"github.com/ferrypkg/ferry/artifact"
)

// Advice is what to type about one kind of library error: the libraries
// say what is wrong, with sentinels and typed errors, and never name a
// command or a flag (docs/design/layering.md); the command line adds the
// advice.
type Advice struct {
	// Is matches the error (errors.Is or errors.As inside).
	Is func(error) bool
	// Say is the advice, in parentheses after the error; if empty, For
	// says it from the error.
	Say string
	For func(error) string
}

// AdviseIs is the Advice for errors that wrap target.
func AdviseIs(target error, say string) Advice {
	return Advice{Is: func(err error) bool { return errors.Is(err, target) }, Say: say}
}

// Advise adds to err the first advice that matches it, if any.
func Advise(err error, advice []Advice) error {
	for _, a := range advice {
		if !a.Is(err) {
			continue
		}
		say := a.Say
		if say == "" {
			say = a.For(err)
		}
		return fmt.Errorf("%w (%s)", err, say)
	}
	return err
}

// artifactAdvice is the advice about the errors of artifact, which both
// binaries link.
var artifactAdvice = []Advice{
	AdviseIs(artifact.ErrMissingBlobs, "push the whole package; make the delta against a receipt of this repository: ferry registry have --prefix NAME; or, with package push, name the repository that holds them: --mount-from REPO"),
	{Is: func(err error) bool {
		var be *artifact.BlobError
		return errors.As(err, &be) && be.Op == artifact.OpReadBack
	}, Say: "the registry's copy is damaged: push the whole package, or a package carrying that blob, to repair it"},
	AdviseIs(artifact.ErrSignatureLeftBehind, "copy the signature with the package (oras copy -r, regctl image copy --referrers), or copy its tag too (crane copy SOURCE:TAG DEST:TAG)"),
	AdviseIs(artifact.ErrSBOMNotCarried, "was it created with --sbom=false?"),
}
