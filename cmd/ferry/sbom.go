package main

import (
	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/sbomcmd"
)

// newSBOMGroupCmd is `ferry sbom` (package sbomcmd) with this binary's
// cluster flags and way to the in-cluster registry.
func newSBOMGroupCmd() *cobra.Command {
	return sbomcmd.New(sbomcmd.Deps{
		Kube:          func(cmd *cobra.Command) sbomcmd.Kube { return clusterKube(cmd) },
		Registry:      func(cmd *cobra.Command) sbomcmd.OpenRegistry { return clusterRegistryOpener(cmd) },
		PackageClient: packageClient,
		QuietClients:  quietClients,
		RegistryArg:   registryArg,
	})
}
