package cli

import (
	"github.com/spf13/cobra"
)

// newRegistryCmd groups the registry commands: serve, load, check, connect, login, logout.
func newRegistryCmd() *cobra.Command {
	cmd := GroupCmd(&cobra.Command{
		Use:   "registry",
		Short: "Run, load, check, connect to and log in to OCI registries",
		Example: `  ferry registry serve --load app.tar.zst
  ferry registry check 127.0.0.1:5000
  ferry registry login registry.example.com -u ci --password-stdin < token`,
	})
	cmd.AddCommand(newRegistryLoginCmd(), newRegistryLogoutCmd())
	return cmd
}
