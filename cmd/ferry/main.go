// Command ferry carries Kubernetes software into air-gapped clusters as OCI
// packages.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrypkg/ferry/internal/redact"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCmd()
	// The front binary hands what is not its own to the full one, which
	// refuses commands that do not exist.
	err := handOff(root, os.Args[1:])
	if err == nil {
		err = unknownCommand(root, os.Args[1:])
	}
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	stop()
	if err != nil {
		// Whoever wrote the message (go-git and net/http put the URLs
		// they were given into theirs), no credential reaches the
		// terminal.
		fmt.Fprintln(os.Stderr, "ferry: "+redact.Text(oneLine(err)))
		os.Exit(1)
	}
}
