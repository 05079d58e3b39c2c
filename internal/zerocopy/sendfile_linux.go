package zerocopy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// maxSendFile is the most one sendfile(2) call is asked to move (Linux
// moves at most 0x7ffff000 bytes a call).
const maxSendFile = 1 << 30

func sendFile(c *net.TCPConn, f *os.File, off, n int64) (int64, error) {
	dst, err := c.SyscallConn()
	if err != nil {
		return copyFile(c, f, off, n)
	}
	src, err := f.SyscallConn()
	if err != nil {
		return copyFile(c, f, off, n)
	}
	var written int64
	var serr error
	cerr := src.Read(func(sfd uintptr) bool {
		werr := dst.Write(func(dfd uintptr) bool {
			for written < n {
				o := off + written
				k, err := syscall.Sendfile(int(dfd), int(sfd), &o, int(min(n-written, maxSendFile)))
				if k > 0 {
					written += int64(k)
				}
				switch {
				case errors.Is(err, syscall.EAGAIN):
					return false // wait until c can take more
				case errors.Is(err, syscall.EINTR):
					continue
				case err != nil:
					serr = os.NewSyscallError("sendfile", err)
					return true
				case k == 0:
					serr = io.ErrUnexpectedEOF // f is shorter than it was
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
		return true
	})
	if serr == nil {
		serr = cerr
	}
	return written, serr
}
