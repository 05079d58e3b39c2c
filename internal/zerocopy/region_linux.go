package zerocopy

import (
	"os"
	"syscall"
	"unsafe"
)

// mapFile maps n bytes of f from off, read-only: the mapping starts at the
// page that holds off, skip bytes before it.
func mapFile(f *os.File, off, n int64) (m []byte, skip int, err error) {
	page := int64(os.Getpagesize())
	base := off &^ (page - 1)
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, 0, err
	}
	cerr := rc.Control(func(fd uintptr) {
		m, err = syscall.Mmap(int(fd), base, int(off-base+n), syscall.PROT_READ, syscall.MAP_SHARED)
	})
	if cerr != nil {
		return nil, 0, cerr
	}
	if err != nil {
		return nil, 0, os.NewSyscallError("mmap", err)
	}
	return m, int(off - base), nil
}

func unmapFile(m []byte) { _ = syscall.Munmap(m) }

// holds reports whether addr lies in r's current mapping.
func (r *Region) holds(addr uintptr) bool {
	if len(r.mapped) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(r.mapped)))
	return addr >= start && addr < start+uintptr(len(r.mapped))
}
