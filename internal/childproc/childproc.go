// Package childproc starts the programs ferry runs (the SBOM helper, the
// chart renderer, git's credential helpers) tied to ferry: a child dies with
// ferry, even when ferry is killed outright (SIGKILL: on Linux the kernel
// sends the child SIGKILL when its parent dies), and a cancelled context
// kills the child's whole process group, not only the child, so nothing it
// started outlives it. Run runs one within limits on its memory, time,
// output and writes, for what evaluates input nobody vetted.
package childproc

import (
	"context"
	"os/exec"
	"time"
)

// DefaultWaitDelay is how long Wait waits for a killed child's output to
// be closed before it gives up on it (a grandchild may hold it).
const DefaultWaitDelay = 5 * time.Second

// Command is exec.CommandContext tied to the calling process: the child
// runs in a process group of its own, which a cancelled ctx kills whole,
// and (on Linux) is killed when ferry dies.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	tie(cmd)
	cmd.WaitDelay = DefaultWaitDelay
	return cmd
}
