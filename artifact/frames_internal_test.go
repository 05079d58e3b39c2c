package artifact

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// writeFrames writes head through the encoder, body as a raw frame in
// writes of the given sizes (cycled), then tail through the encoder.
func writeFrames(t *testing.T, head, body, tail []byte, chunks []int) []byte {
	t.Helper()
	var out bytes.Buffer
	f, err := newFrameWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(head); err != nil {
		t.Fatal(err)
	}
	if err := f.beginRaw(int64(len(body))); err != nil {
		t.Fatal(err)
	}
	for i, rest := 0, body; len(rest) > 0; i++ {
		n := min(chunks[i%len(chunks)], len(rest))
		if _, err := f.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := f.endRaw(); err != nil {
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
	f, err := newFrameWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.beginRaw(10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 11)); err == nil {
		t.Fatal("writing 11 bytes into a 10-byte raw frame succeeded")
	}
	if _, err := f.Write(make([]byte, 9)); err != nil {
		t.Fatal(err)
	}
	if err := f.endRaw(); err == nil {
		t.Fatal("ending a raw frame 1 byte short succeeded")
	}
}
