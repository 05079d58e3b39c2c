package childproc

import (
	"os/exec"
	"syscall"
)

// tie puts cmd in its own process group, kills that group on cancel, and
// asks the kernel to SIGKILL the child when the thread that started it
// exits. Go never ends a thread that has no locked goroutine, so that is
// when the process exits.
func tie(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		// The group's id is the child's pid (Setpgid with Pgid 0).
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
}
