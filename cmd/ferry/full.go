package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

// addFull adds the commands that only the full binary has: those that link
// cosign's signing, Helm, client-go or the distribution server. The front
// binary (cmd/ferry/front) hands them to this one.
func addFull(root, pkg, reg *cobra.Command) {
	pkg.AddCommand(newCreateCmd(), newFindImagesCmd(), newSignCmd(), newMirrorCmd(), newConvertCmd(), newImportCmd())
	reg.AddCommand(newRegistryServeCmd(), newRegistryCheckCmd(), newRegistryLoadCmd(), newRegistryConnectCmd(), newRegistryGCCmd(), newRegistryMigrateCmd(), newRegistryHaveCmd(), newRegistryBackupCmd(), newRegistryRestoreCmd())
	root.AddCommand(newKeyCmd(), newInitCmd(), newDeployCmd(), newListCmd(), newRemoveCmd(), newAgentCmd(), newAgentProbeCmd(), newGitServerCmd(), newControllerCmd(), newDashboardCmd(), newFleetCmd(), newSBOMGroupCmd())
}

// handOff runs every command here: this is the full binary. Started by a
// front binary (which says its build in envFrontBuild), it refuses to run
// for a front of another build: a stale or foreign ferry-full beside a new
// ferry would run commands the user did not install.
func handOff(*cobra.Command, []string) error {
	front, ok := os.LookupEnv(cli.EnvFrontBuild)
	if !ok {
		return nil
	}
	os.Unsetenv(cli.EnvFrontBuild) // not for what this binary runs
	self := cli.CurrentVersion()
	if front != self.Identity() {
		exe, _ := os.Executable()
		return fmt.Errorf("%s is another build than the ferry that started it (ferry-full: %s; ferry: %s): install both binaries from one build (`make build` puts them in bin/)", exe, self.Identity(), front)
	}
	return nil
}
