//go:build !ferryfront

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// addFull adds the commands that only the full binary has: those that link
// cosign's signing, Helm, client-go or the distribution server. The front
// binary (built with -tags ferryfront) hands them to this one (front.go).
func addFull(root, pkg, reg *cobra.Command) {
	pkg.AddCommand(newCreateCmd(), newSignCmd(), newMirrorCmd())
	reg.AddCommand(newRegistryServeCmd(), newRegistryCheckCmd(), newRegistryLoadCmd(), newRegistryConnectCmd(), newRegistryGCCmd(), newRegistryMigrateCmd())
	root.AddCommand(newKeyCmd(), newInitCmd(), newDeployCmd(), newListCmd(), newRemoveCmd(), newAgentCmd(), newGitServerCmd(), newControllerCmd(), newDashboardCmd())
}

// handOff runs every command here: this is the full binary. Started by a
// front binary (which says its build in envFrontBuild), it refuses to run
// for a front of another build: a stale or foreign ferry-full beside a new
// ferry would run commands the user did not install.
func handOff(*cobra.Command, []string) error {
	front, ok := os.LookupEnv(envFrontBuild)
	if !ok {
		return nil
	}
	os.Unsetenv(envFrontBuild) // not for what this binary runs
	self := currentVersion()
	if front != self.identity() {
		exe, _ := os.Executable()
		return fmt.Errorf("%s is another build than the ferry that started it (ferry-full: %s; ferry: %s): install both binaries from one build (`make build` puts them in bin/)", exe, self.identity(), front)
	}
	return nil
}

// fullVersion is nothing here: this binary is the full one.
func fullVersion(context.Context) (*versionInfo, string) { return nil, "" }
