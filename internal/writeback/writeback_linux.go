package writeback

import (
	"os"

	"golang.org/x/sys/unix"
)

// Start asks the kernel to start writing n bytes of f at off to disk, and
// does not wait (sync_file_range(2) with SYNC_FILE_RANGE_WRITE). f may be
// any handle on the file, read-only too. It is advice: an error changes
// nothing, the final fsync still writes.
func Start(f *os.File, off, n int64) {
	c, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = c.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}
