// Command ferry (built as bin/ferry) is the front binary: it holds the
// commands that need neither cosign's signing, Helm, client-go nor the
// distribution server, and hands every other one to ferry-full beside it.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/childproc"
)

// The front binary (`make build` builds it as bin/ferry from cmd/ferry/front)
// holds the commands that need neither cosign's signing, Helm,
// client-go nor the distribution server: version, package push, pull,
// inspect and verify, registry login and logout. It starts in a few
// milliseconds and a few MiB, where a binary that links those libraries
// spends ~0.1 s and ~50 MiB initialising them before any work. Every other
// command, --help of the whole tree and shell completion are handed to the
// full binary, fullName beside it (bin/ferry-full), which has every command,
// once its file shows it is ferry's full binary of this binary's own build
// (checkFull): exec replaces this process, so exit codes, signals, stdin and
// the terminal are the full binary's own.
const fullName = "ferry-full"

func main() { cli.Run(cli.Hooks{HandOff: handOff, FullVersion: fullVersion}) }

// handOff execs the full binary unless args name one of this binary's own
// commands (a runnable leaf of its tree). It returns only when the full
// binary cannot be run: missing, or refused by checkFull.
func handOff(root *cobra.Command, args []string) error {
	if cmd, _, err := root.Find(args); err == nil && cmd != root && cmd.Runnable() && !cmd.HasSubCommands() && !needsFull(args) {
		return nil
	}
	full, err := findFull()
	if err != nil {
		return err
	}
	if _, err := checkFull(full); err != nil {
		return err
	}
	env := append(os.Environ(), cli.EnvFrontBuild+"="+cli.CurrentVersion().Identity())
	return syscall.Exec(full, append([]string{full}, args...), env)
}

// needsFull reports flags only the full binary serves: verify --images
// checks images' signatures with sigstore-go, which this binary leaves out.
func needsFull(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--images" || strings.HasPrefix(a, "--images=") && a != "--images=false" {
			return true
		}
	}
	return false
}

// fullVersion reads the version of the full binary beside this one from
// its file, without running it; the message says why it would not be run.
func fullVersion(context.Context) (*cli.VersionInfo, string) {
	full, err := findFull()
	if err != nil {
		return nil, err.Error()
	}
	v, err := checkFull(full)
	if err != nil {
		return v, err.Error()
	}
	return v, ""
}

// checkFull reads the build of the full binary at path from the file
// (cli.ReadVersion: nothing of it runs) and refuses one that is not ferry's
// full binary or not of this binary's build: a stale or foreign ferry-full
// beside or on PATH would run commands the user did not install. It
// returns the version read, if any.
func checkFull(path string) (*cli.VersionInfo, error) {
	v, err := cli.ReadVersion(path, cli.FullPackage)
	if err != nil {
		return nil, fmt.Errorf("%s: %w; install both binaries from one build (`make build` puts them in bin/)", path, err)
	}
	if self := cli.CurrentVersion(); v.Identity() != self.Identity() {
		return &v, fmt.Errorf("%s is another build than this ferry (ferry-full: %s; ferry: %s): install both binaries from one build (`make build` puts them in bin/)", path, v.Identity(), self.Identity())
	}
	return &v, nil
}

// findFull finds the full binary: beside this executable (symbolic links
// followed, as when bin/ferry is linked into /usr/local/bin), else on PATH.
func findFull() (string, error) {
	p, exe, err := childproc.FindSibling(fullName)
	if p != "" || err != nil {
		return p, err
	}
	return "", fmt.Errorf("this command is in %s, which is neither beside %s nor on PATH; install both binaries (`make build` puts them in bin/)", fullName, strings.TrimSpace(exe))
}
