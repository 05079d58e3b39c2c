// Command ferry carries Kubernetes software into air-gapped clusters as OCI
// packages. This is the full binary (ferry-full beside the front binary of
// cmd/ferry/front, or alone from `go install`): it has every command.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact/chartrender"
	// The engine of image signature checks (create, package verify
	// --images, the agent's admission): sigstore-go, kept out of the front.
	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == chartrender.ChildArg {
		renderChild()
	}
	cli.Run(fullHooks)
}

// renderChild is this binary as the child that loads and renders charts
// for find-images, create and the controller (chartrender.Limited), under
// the limits its parent set; it exits when its parent closes its input.
func renderChild() {
	answers := os.Stdout
	os.Stdout = os.Stderr // the answers' pipe is the renderer's alone
	if err := chartrender.ServeChild(os.Stdin, answers); err != nil {
		fmt.Fprintln(os.Stderr, "ferry: "+err.Error())
		os.Exit(2)
	}
	os.Exit(0)
}

// fullHooks add the commands only this binary has.
var fullHooks = cli.Hooks{Add: addFull, HandOff: handOff, Advice: advice}

// newRootCmd builds the full binary's command tree.
func newRootCmd() *cobra.Command { return cli.NewTree(fullHooks) }
