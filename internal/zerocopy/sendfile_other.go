//go:build !linux

package zerocopy

import (
	"net"
	"os"
)

func sendFile(c *net.TCPConn, f *os.File, off, n int64) (int64, error) {
	return copyFile(c, f, off, n)
}
