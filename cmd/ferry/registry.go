package main

import "github.com/spf13/cobra"

// newRegistryCmd groups the embedded-registry commands (serve, load, check).
func newRegistryCmd() *cobra.Command {
	return &cobra.Command{Use: "registry", Short: "Run and check OCI registries"}
}
