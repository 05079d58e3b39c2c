package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
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
	if err != nil {
		err = Advise(err, append(artifactAdvice, h.Advice...))
		// Whoever wrote the message (go-git and net/http put the URLs
		// they were given into theirs), no credential reaches the
		// terminal.
		// Redacted whole, before the line is folded and cut.
		fmt.Fprintln(os.Stderr, "ferry: "+OneLine(errors.New(redact.Text(err.Error()))))
		os.Exit(1)
	}
}
