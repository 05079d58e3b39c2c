package backup

import "os"

// writebackEvery is how many bytes a backup file is written between two
// requests that the kernel start writing them to disk.
const writebackEvery = 8 << 20

// writingBack passes writes on to f and, every writebackEvery bytes, asks
// the kernel to start writing what it was given to the disk without
// waiting for it (startWriteback). The disk then works while the registry
// is still being read, and the Sync that ends the backup finds little left
// to write; otherwise the kernel holds all of it (up to a tenth of memory)
// until that Sync.
type writingBack struct {
	f         *os.File
	off, from int64 // where the next write lands; what is not yet asked for
}

func (w *writingBack) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.from >= writebackEvery {
		startWriteback(w.f, w.from, w.off-w.from)
		w.from = w.off
	}
	return n, err
}
