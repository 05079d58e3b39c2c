// Command ferry carries Kubernetes software into air-gapped clusters as OCI
// packages.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCmd()
	err := handOff(root, os.Args[1:])
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry: "+oneLine(err))
		os.Exit(1)
	}
}
