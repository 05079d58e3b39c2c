package zstdframe

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/klauspost/compress/zstd"
)

// writeFrames writes head through the encoder, body as a raw frame in
// writes of the given sizes (cycled), then tail through the encoder.
func writeFrames(t *testing.T, head, body, tail []byte, chunks []int) []byte {
	t.Helper()
	var out bytes.Buffer
	f, err := NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(head); err != nil {
		t.Fatal(err)
	}
	if err := f.BeginRaw(int64(len(body))); err != nil {
		t.Fatal(err)
	}
	for i, rest := 0, body; len(rest) > 0; i++ {
		n := min(chunks[i%len(chunks)], len(rest))
		if _, err := f.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := f.EndRaw(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(tail); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestFrameWriterRawFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, 3*rawBlockSize+12345)
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	head, tail := bytes.Repeat([]byte("head "), 1000), bytes.Repeat([]byte("tail "), 1000)
	whole := writeFrames(t, head, body, tail, []int{len(body)})
	for _, chunks := range [][]int{{rawBlockSize}, {1}, {7, 70000, 200000}, {rawBlockSize - 1, rawBlockSize + 1}} {
		if got := writeFrames(t, head, body, tail, chunks[:]); !bytes.Equal(got, whole) {
			t.Fatalf("writes of %v gave other bytes than one write", chunks)
		}
	}
	// The body is stored as it is, in 4 blocks; head and tail are compressed.
	if !bytes.Contains(whole, body[:rawBlockSize]) || len(whole) > len(body)+200 {
		t.Fatalf("raw frame: %d bytes for a %d-byte body", len(whole), len(body))
	}
	dec, err := zstd.NewReader(bytes.NewReader(whole))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	got, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append(append([]byte{}, head...), body...), tail...); !bytes.Equal(got, want) {
		t.Fatalf("decoded %d bytes, want %d", len(got), len(want))
	}
}

func TestFrameWriterSizeChecked(t *testing.T) {
	f, err := NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.BeginRaw(10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 11)); err == nil {
		t.Fatal("writing 11 bytes into a 10-byte raw frame succeeded")
	}
	if _, err := f.Write(make([]byte, 9)); err != nil {
		t.Fatal(err)
	}
	if err := f.EndRaw(); err == nil {
		t.Fatal("ending a raw frame 1 byte short succeeded")
	}
}

func TestZstReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	body := make([]byte, 3*rawBlockSize+999)
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	head, tail := bytes.Repeat([]byte("head "), 3000), bytes.Repeat([]byte("tail "), 3000)
	want := append(append(append([]byte{}, head...), body...), tail...)
	ours := writeFrames(t, head, body, tail, []int{len(body)})
	open := func(t *testing.T, data []byte) *Reader {
		t.Helper()
		z, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(z.Close)
		return z
	}

	t.Run("read", func(t *testing.T) {
		// Ours, one ordinary frame, and one behind a skippable frame.
		var one bytes.Buffer
		enc, _ := zstd.NewWriter(&one)
		enc.Write(want)
		enc.Close()
		skippable := append([]byte{0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'}, one.Bytes()...)
		for name, data := range map[string][]byte{"raw frames": ours, "one frame": one.Bytes(), "skippable": skippable} {
			got, err := io.ReadAll(open(t, data))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes, %v; want %d", name, len(got), err, len(want))
			}
		}
	})

	t.Run("seek", func(t *testing.T) {
		for _, at := range []int{0, 1, rawBlockSize - 1, rawBlockSize, rawBlockSize + 1, 2*rawBlockSize + 5, len(body) - 1} {
			z := open(t, ours)
			got := make([]byte, len(head)+1)
			if _, err := io.ReadFull(z, got); err != nil {
				t.Fatal(err)
			}
			if pos, err := z.Seek(0, io.SeekCurrent); err != nil || pos != int64(len(head)+1) {
				t.Fatalf("position %d, %v", pos, err)
			}
			// Skip from the body's second byte to at+1, then read the rest.
			if _, err := z.Seek(int64(at), io.SeekCurrent); err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(z)
			if err != nil || !bytes.Equal(rest, want[len(head)+1+at:]) {
				t.Fatalf("seek %d: read %d bytes, %v", at, len(rest), err)
			}
		}
		if _, err := open(t, ours).Seek(-1, io.SeekCurrent); err == nil {
			t.Fatal("a backward seek succeeded")
		}
	})

	t.Run("damage", func(t *testing.T) {
		i := bytes.Index(ours, body[:64])
		if i < 3 {
			t.Fatal("raw frame not found")
		}
		damaged := bytes.Clone(ours)
		damaged[i-3] ^= 0x08 // first block's size
		truncatedData := ours[:i+rawBlockSize+100]
		for name, data := range map[string][]byte{"block header": damaged, "truncated": truncatedData} {
			if _, err := io.ReadAll(open(t, data)); !errors.Is(err, corrupt.Err) {
				t.Fatalf("%s: %v, want corrupt.Err", name, err)
			}
		}
		// Skipping past the end of a truncated raw frame fails too.
		z := open(t, truncatedData)
		io.ReadFull(z, make([]byte, len(head)))
		if _, err := z.Seek(int64(len(body)), io.SeekCurrent); !errors.Is(err, corrupt.Err) {
			t.Fatalf("seek past a truncated frame: %v", err)
		}
	})
}
