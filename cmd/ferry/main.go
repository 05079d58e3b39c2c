// Command ferry carries Kubernetes software into air-gapped clusters as OCI
// packages. This is the full binary (ferry-full beside the front binary of
// cmd/ferry/front, or alone from `go install`): it has every command.
package main

import (
	"github.com/spf13/cobra"

	// The engine of image signature checks (create, package verify
	// --images, the agent's admission): sigstore-go, kept out of the front.
	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

func main() { cli.Run(fullHooks) }

// fullHooks add the commands only this binary has.
var fullHooks = cli.Hooks{Add: addFull, HandOff: handOff}

// newRootCmd builds the full binary's command tree.
func newRootCmd() *cobra.Command { return cli.NewTree(fullHooks) }
