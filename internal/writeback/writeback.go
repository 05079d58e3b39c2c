// Package writeback keeps a large file being written flowing to the disk:
// every Every bytes written, it asks the kernel to start writing them out,
// without waiting. The disk then works while the writer still reads its
// input, and the fsync that ends the write finds little left to do;
// otherwise the kernel holds all of it (up to a tenth of memory) until that
// fsync, and the disk sits idle until then.
package writeback

import "os"

// Every is how many bytes are written between two requests that the
// kernel start writing them to disk.
const Every = 8 << 20

// Writer passes writes on to F and, every Every bytes, asks the kernel to
// start writing what it was given (Start).
type Writer struct {
	F *os.File
	// Off is where the next write lands; from is where the part not yet
	// asked for begins.
	Off, from int64
	start     func(f *os.File, off, n int64)
}

// New is a Writer on f, whose next write lands at off.
func New(f *os.File, off int64) *Writer { return &Writer{F: f, Off: off, from: off, start: Start} }

func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.F.Write(p)
	w.Wrote(int64(n))
	return n, err
}

// Wrote counts n bytes written to the file by someone else (through
// another handle on it) and starts writing them back in turn.
func (w *Writer) Wrote(n int64) {
	w.Off += n
	if w.Off-w.from >= Every {
		w.start(w.F, w.from, w.Off-w.from)
		w.from = w.Off
	}
}
