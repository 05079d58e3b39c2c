package main

import (
	"github.com/spf13/cobra"
)

// newRegistryCmd groups the embedded-registry commands (serve, check).
func newRegistryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "registry", Short: "Run and check OCI registries"}
	cmd.AddCommand(newRegistryServeCmd(), newRegistryCheckCmd(), newRegistryLoadCmd())
	return cmd
}
