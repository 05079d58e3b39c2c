package backup

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing n bytes of f at off to
// disk, and does not wait (sync_file_range(2) with SYNC_FILE_RANGE_WRITE).
// It is advice: an error changes nothing, the final Sync still writes.
func startWriteback(f *os.File, off, n int64) {
	c, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = c.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}
