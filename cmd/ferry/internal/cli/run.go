package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ferrypkg/ferry/internal/redact"
)

// Run runs a binary's command line and exits.
func Run(h Hooks) {
	// Go's log package is where net/http says what a registry or a peer
	// did wrong ("Unsolicited response received on idle HTTP channel",
	// quoting its bytes): not ferry's output, which is one line per error.
	log.SetOutput(io.Discard)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := NewTree(h)
	// The front binary hands what is not its own to the full one, which
	// refuses commands that do not exist.
	err := h.HandOff(root, os.Args[1:])
	if err == nil {
		err = unknownCommand(root, os.Args[1:])
	}
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	stop()
	var status ExitStatus
	if errors.As(err, &status) {
		os.Exit(int(status))
	}
	if err != nil {
		ps := Problems{err}
		errors.As(err, &ps)
		for _, p := range ps {
			fmt.Fprintln(os.Stderr, ErrorLine(p, h.Advice))
		}
		os.Exit(1)
	}
}

// ErrorLine is the line err is printed as: "ferry: ", then err with the
// advice the command line adds, redacted (whoever wrote the message —
// go-git and net/http put the URLs they were given into theirs — no
// credential reaches the terminal), folded to one line and cut.
func ErrorLine(err error, advice []Advice) string {
	err = Advise(err, append(artifactAdvice, advice...))
	// Redacted whole, before the line is folded and cut.
	return "ferry: " + OneLine(errors.New(redact.Text(err.Error())))
}

// Problems is an error of several problems found at once (a dry run's):
// Run prints each on a line of its own.
type Problems []error

func (ps Problems) Error() string {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Error()
	}
	return strings.Join(msgs, "; ")
}

// ExitStatus ends a command that has said what it found with that exit
// status, and nothing more on stderr (`ferry sbom audit`'s 3: findings).
type ExitStatus int

func (s ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }
