//go:build !unix

package childproc

import "os/exec"

// tie does nothing where there are no process groups: a cancelled context
// kills the child only.
func tie(cmd *exec.Cmd) {}
