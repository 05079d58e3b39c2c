//go:build !ferryfront

package main

import "github.com/spf13/cobra"

// addFull adds the commands that only the full binary has: those that link
// cosign's signing, Helm, client-go or the distribution server. The front
// binary (built with -tags ferryfront) hands them to this one (front.go).
func addFull(root, pkg, reg *cobra.Command) {
	pkg.AddCommand(newCreateCmd(), newSignCmd(), newMirrorCmd())
	reg.AddCommand(newRegistryServeCmd(), newRegistryCheckCmd(), newRegistryLoadCmd(), newRegistryConnectCmd(), newRegistryGCCmd(), newRegistryMigrateCmd())
	root.AddCommand(newKeyCmd(), newInitCmd(), newDeployCmd(), newListCmd(), newRemoveCmd(), newAgentCmd(), newGitServerCmd(), newControllerCmd(), newDashboardCmd())
}

// handOff runs every command here: this is the full binary.
func handOff(*cobra.Command, []string) error { return nil }
