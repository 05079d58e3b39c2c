package childproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setLimits sets the kernel's limits on the running child: its data
// segment (a Go program's heap: an allocation past it fails, and the child
// exits "out of memory") at dataLimit, and the size of any one file it
// writes (SIGXFSZ). Errors are ignored: the watcher's polls still hold.
func setLimits(pid int, lim Limits) {
	if lim.Memory > 0 {
		data := uint64(dataLimit(lim))
		_ = unix.Prlimit(pid, unix.RLIMIT_DATA, &unix.Rlimit{Cur: data, Max: data}, nil)
	}
	if lim.Disk > 0 {
		_ = unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(lim.Disk), Max: uint64(lim.Disk)}, nil)
	}
}

// usage reads a process's resident set (VmRSS), data segment (VmData:
// what RLIMIT_DATA counts) and the bytes it has written (wchar: every
// write, to files and pipes, including files it has removed since), in
// bytes.
func usage(pid int) (rss, data, written int64, ok bool) {
	rss, ok1 := procField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:", 1024)
	data, ok2 := procField(fmt.Sprintf("/proc/%d/status", pid), "VmData:", 1024)
	written, ok3 := procField(fmt.Sprintf("/proc/%d/io", pid), "wchar:", 1)
	return rss, data, written, ok1 && ok2 && ok3
}

func procField(path, key string, unit int64) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			n, err := strconv.ParseInt(v, 10, 64)
			return n * unit, err == nil
		}
	}
	return 0, false
}

// fileTooLarge reports a child killed by SIGXFSZ (RLIMIT_FSIZE), or one
// that said a write failed for it (EFBIG: a Go program ignores the
// signal).
func fileTooLarge(err error, stderr string) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGXFSZ || strings.Contains(stderr, "file too large")
}

// peakRSS is a finished process's peak resident set, in bytes.
func peakRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}
