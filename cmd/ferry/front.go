//go:build ferryfront

package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/internal/sibling"
)

// The front binary (`make build` builds it as bin/ferry, with -tags
// ferryfront) holds the commands that need neither cosign's signing, Helm,
// client-go nor the distribution server: version, package push, pull,
// inspect and verify, registry login and logout. It starts in a few
// milliseconds and a few MiB, where a binary that links those libraries
// spends ~0.1 s and ~50 MiB initialising them before any work. Every other
// command, --help of the whole tree and shell completion are handed to the
// full binary, fullName beside it (bin/ferry-full), which has every command:
// exec replaces this process, so exit codes, signals, stdin and the terminal
// are the full binary's own.
const fullName = "ferry-full"

// addFull adds nothing: the full binary has those commands.
func addFull(root, pkg, reg *cobra.Command) {}

// handOff execs the full binary unless args name one of this binary's own
// commands (a runnable leaf of its tree). It returns only when the full
// binary cannot be run.
func handOff(root *cobra.Command, args []string) error {
	if cmd, _, err := root.Find(args); err == nil && cmd != root && cmd.Runnable() && !cmd.HasSubCommands() {
		return nil
	}
	full, err := findFull()
	if err != nil {
		return err
	}
	return syscall.Exec(full, append([]string{full}, args...), os.Environ())
}

// findFull finds the full binary: beside this executable (symbolic links
// followed, as when bin/ferry is linked into /usr/local/bin), else on PATH.
func findFull() (string, error) {
	p, exe, err := sibling.Find(fullName)
	if p != "" || err != nil {
		return p, err
	}
	return "", fmt.Errorf("this command is in %s, which is neither beside %s nor on PATH; install both binaries (`make build` puts them in bin/)", fullName, strings.TrimSpace(exe))
}
