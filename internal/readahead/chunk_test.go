package readahead

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

// sizes records the size of every write.
type sizes []int

func (s *sizes) Write(p []byte) (int, error) { *s = append(*s, len(p)); return len(p), nil }

func TestCopy(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
	var got sizes
	// One byte per Read: writes still come in whole chunks.
	n, err := Copy(&got, iotest.OneByteReader(bytes.NewReader(data)), make([]byte, 4096))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Copy: %d, %v", n, err)
	}
	if want := (sizes{4096, 4096, 1808}); !slices.Equal(got, want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	boom := errors.New("boom")
	if _, err := Copy(io.Discard, iotest.ErrReader(boom), make([]byte, 8)); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
}
