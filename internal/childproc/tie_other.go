//go:build unix && !linux

package childproc

import (
	"os/exec"
	"syscall"
)

// tie puts cmd in its own process group and kills that group on cancel.
// Outside Linux there is no parent-death signal: a child of a ferry killed
// outright runs to its own end (the SBOM helper's time limit bounds it).
func tie(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
}
