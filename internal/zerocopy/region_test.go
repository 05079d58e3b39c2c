package zerocopy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// regionFile writes n pseudo-random bytes to a file and opens it.
func regionFile(t *testing.T, n int) (*os.File, []byte) {
	t.Helper()
	data := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	return openTemp(t, data), data
}

// openTemp writes data to a file and opens it, closed when t ends.
func openTemp(t *testing.T, data []byte) *os.File {
	t.Helper()
	f, err := fixture.TempFile(t.TempDir(), data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// collect reads a region to its end in pieces of at most step bytes.
func collect(t *testing.T, r *zerocopy.Region, n, step int64) ([]byte, error) {
	t.Helper()
	var got []byte
	err := r.Guard(func() error {
		for int64(len(got)) < n {
			p, err := r.Next(min(step, n-int64(len(got))))
			if err != nil {
				return err
			}
			got = append(got, p...)
		}
		return nil
	})
	return got, err
}

// A region that starts off a page boundary and spans several mapped chunks
// yields the file's bytes, whatever the pieces asked for, mapped or read;
// a file shorter than the region yields what it has, then
// io.ErrUnexpectedEOF.
func TestRegion(t *testing.T) {
	f, data := regionFile(t, 11<<20+123)
	for _, c := range []struct {
		off, n, step int64
	}{
		{0, 11<<20 + 123, 1 << 20},
		{4097, 9<<20 + 5, 3},
		{4097, 9<<20 + 5, 1<<20 + 7},
		{5<<20 - 1, 2, 1},
	} {
		if c.step == 3 && testing.Short() {
			continue
		}
		for _, mapped := range []bool{true, false} {
			r := zerocopy.NewRegion(f, c.off, c.n, nil)
			if !mapped {
				zerocopy.NoMap(r)
			}
			got, err := collect(t, r, c.n, c.step)
			r.Close()
			if err != nil || !bytes.Equal(got, data[c.off:c.off+c.n]) {
				t.Fatalf("region %d+%d in pieces of %d (mapped: %v): %d bytes (equal: %v), %v", c.off, c.n, c.step, mapped, len(got), bytes.Equal(got, data[c.off:c.off+int64(len(got))]), err)
			}
		}
	}
	for _, mapped := range []bool{true, false} {
		r := zerocopy.NewRegion(f, 10<<20, 2<<20, make([]byte, 64<<10))
		if !mapped {
			zerocopy.NoMap(r)
		}
		got, err := collect(t, r, 2<<20, 1<<20)
		r.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, data[10<<20:]) {
			t.Fatalf("past the file's end (mapped: %v): %d bytes, %v; want %d and io.ErrUnexpectedEOF", mapped, len(got), err, len(data)-10<<20)
		}
	}
}

// A file cut short by another process while its region is mapped is
// ErrFileChanged, not a crash (SIGBUS on the vanished pages).
func TestRegionFileCutShort(t *testing.T) {
	f, _ := regionFile(t, 8<<20)
	r := zerocopy.NewRegion(f, 0, 8<<20, make([]byte, 64<<10))
	defer r.Close()
	err := r.Guard(func() error {
		p, err := r.Next(1 << 20)
		if err != nil {
			return err
		}
		_ = p[0]
		if err := os.Truncate(f.Name(), 4096); err != nil {
			return err
		}
		var sum byte
		for _, b := range p[8192:] {
			sum += b
		}
		return fmt.Errorf("read the vanished bytes without a fault (sum %d)", sum)
	})
	if !errors.Is(err, zerocopy.ErrFileChanged) {
		t.Fatalf("Guard: %v, want ErrFileChanged", err)
	}
}

// Guard lets any other panic go on.
func TestRegionGuardOtherPanic(t *testing.T) {
	f, _ := regionFile(t, 4096)
	r := zerocopy.NewRegion(f, 0, 4096, nil)
	defer r.Close()
	defer func() {
		if v := recover(); v == nil {
			t.Fatal("a nil dereference inside Guard did not panic")
		}
	}()
	_ = r.Guard(func() error {
		var p *int
		return errors.New(string(rune(*p)))
	})
}
