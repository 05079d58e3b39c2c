package cli

import (
	"github.com/spf13/cobra"
)

// newRegistryCmd groups the registry commands: serve, load, check, connect, login, logout.
func newRegistryCmd() *cobra.Command {
	cmd := GroupCmd(&cobra.Command{Use: "registry", Short: "Run, load, check, connect to and log in to OCI registries"})
	cmd.AddCommand(newRegistryLoginCmd(), newRegistryLogoutCmd())
	return cmd
}
