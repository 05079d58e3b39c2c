// Command ferry (built as bin/ferry) is the front binary: it holds the
// commands that need neither cosign's signing, Helm, client-go nor the
// distribution server, and hands every other one to ferry-full beside it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/sibling"
)

// The front binary (`make build` builds it as bin/ferry from cmd/ferry/front)
// holds the commands that need neither cosign's signing, Helm,
// client-go nor the distribution server: version, package push, pull,
// inspect and verify, registry login and logout. It starts in a few
// milliseconds and a few MiB, where a binary that links those libraries
// spends ~0.1 s and ~50 MiB initialising them before any work. Every other
// command, --help of the whole tree and shell completion are handed to the
// full binary, fullName beside it (bin/ferry-full), which has every command:
// exec replaces this process, so exit codes, signals, stdin and the terminal
// are the full binary's own.
const fullName = "ferry-full"

func main() { cli.Run(cli.Hooks{HandOff: handOff, FullVersion: fullVersion}) }

// handOff execs the full binary unless args name one of this binary's own
// commands (a runnable leaf of its tree). It returns only when the full
// binary cannot be run.
func handOff(root *cobra.Command, args []string) error {
	if cmd, _, err := root.Find(args); err == nil && cmd != root && cmd.Runnable() && !cmd.HasSubCommands() && !needsFull(args) {
		return nil
	}
	full, err := findFull()
	if err != nil {
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

// fullVersion asks the full binary beside this one for its version.
func fullVersion(ctx context.Context) (*cli.VersionInfo, string) {
	full, err := findFull()
	if err != nil {
		return nil, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, full, "version", "-o", "json")
	cmd.Env = append(os.Environ(), cli.EnvFrontBuild+"="+cli.CurrentVersion().Identity())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, strings.TrimPrefix(msg, "ferry: ")
	}
	var v cli.VersionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Sprintf("%s version: %v", full, err)
	}
	return &v, ""
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
