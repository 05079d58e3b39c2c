package writeback

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriterAsksEveryEvery(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var asked [][2]int64
	w := New(f, 0)
	w.start = func(_ *os.File, off, n int64) {
		asked = append(asked, [2]int64{off, n})
		Start(f, off, n) // the real call too: advice the kernel takes
	}
	chunk := bytes.Repeat([]byte{7}, 3<<20)
	for range 7 { // 21 MiB in writes of 3 MiB
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	w.Wrote(1 << 20) // a write through another handle counts too
	want := [][2]int64{{0, 9 << 20}, {9 << 20, 9 << 20}}
	if !slices.Equal(asked, want) {
		t.Fatalf("asked for %v, want %v", asked, want)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 21<<20 || w.Off != 22<<20 {
		t.Fatalf("file %v %v, offset %d", fi.Size(), err, w.Off)
	}
}
