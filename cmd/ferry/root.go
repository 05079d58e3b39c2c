package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// newRootCmd builds the whole command tree; there are no package-level
// command globals, so tests can build a fresh tree per run.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "ferry",
		Short:         "Carry Kubernetes software into air-gapped clusters as signed OCI packages",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPackageCmd(), newRegistryCmd(), newKeyCmd(), newInitCmd(), newDeployCmd(), newListCmd(), newRemoveCmd(), newAgentCmd())
	return root
}

// oneLine folds an error onto a single line for the terminal.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
