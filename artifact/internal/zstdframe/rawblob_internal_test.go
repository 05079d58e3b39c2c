package zstdframe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// rawArchive writes head (compressed), body (a raw frame) and a tail to a
// file, and returns it opened, with a zstReader that has read head, as
// archive/tar leaves it after an entry's header.
func rawArchive(t *testing.T, head, body []byte, raw bool) (*os.File, *Reader) {
	t.Helper()
	var data []byte
	if raw {
		data = writeFrames(t, head, body, []byte("tail"), []int{len(body)})
	} else {
		data = writeFrames(t, append(append([]byte{}, head...), body...), nil, []byte("tail"), []int{1})
	}
	f, err := fixture.TempFile(t.TempDir(), data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	z, err := NewReader(f, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Close)
	if _, err := io.ReadFull(z, make([]byte, len(head))); err != nil {
		t.Fatal(err)
	}
	return f, z
}

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// tcpPair is a loopback TCP connection: the client's end, and what the
// server's end receives until the client closes.
func tcpPair(t *testing.T) (*net.TCPConn, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), got
}

// A raw blob read or sent, whole or in pieces, gives the body's bytes and
// ends as any verified blob: io.EOF when they match the digest, a
// corruptBlobError when not; one in a compressed frame is copied.
func TestRawBlob(t *testing.T) {
	head := bytes.Repeat([]byte("h"), 512)
	body := randomBytes(5*rawBlockSize+777, 7)
	good := ocispec.Descriptor{Digest: digest.FromBytes(body), Size: int64(len(body))}
	bad := ocispec.Descriptor{Digest: digest.FromBytes(body[1:]), Size: int64(len(body))}
	for _, raw := range []bool{true, false} {
		for _, desc := range []ocispec.Descriptor{good, bad} {
			wantEnd := error(io.EOF)
			if desc.Digest != good.Digest {
				wantEnd = corrupt.Blob(desc.Digest)
			}
			t.Run(fmt.Sprintf("read/raw=%v/%s", raw, desc.Digest.Encoded()[:8]), func(t *testing.T) {
				_, z := rawArchive(t, head, body, raw)
				b := NewRawBlob(io.LimitReader(z, desc.Size), z, desc, make([]byte, 1<<20))
				defer b.Close()
				var got bytes.Buffer
				_, err := io.CopyBuffer(&got, struct{ io.Reader }{b}, make([]byte, 1000))
				if !bytes.Equal(got.Bytes(), body) || !sameEnd(err, wantEnd, true) {
					t.Fatalf("raw %v: read %d bytes (equal %v), err %v; want %v", raw, got.Len(), bytes.Equal(got.Bytes(), body), err, wantEnd)
				}
				if raw && b.cur == nil {
					t.Fatal("a blob in a raw frame was not found there")
				}
			})
			t.Run(fmt.Sprintf("send/raw=%v/%s", raw, desc.Digest.Encoded()[:8]), func(t *testing.T) {
				_, z := rawArchive(t, head, body, raw)
				b := NewRawBlob(io.LimitReader(z, desc.Size), z, desc, make([]byte, 1<<20))
				defer b.Close()
				c, got := tcpPair(t)
				// As net/http does: a first read into its buffer, then the rest
				// handed to the connection, here in two pieces.
				first := make([]byte, 3000)
				n, err := b.Read(first)
				if err != nil || n != len(first) {
					t.Fatalf("first read: %d, %v", n, err)
				}
				c.Write(first)
				m, err1 := b.SendTo(c, 2*rawBlockSize+5)
				k, err2 := b.SendTo(c, -1)
				c.Close()
				out := <-got
				if m != 2*rawBlockSize+5 || err1 != nil || n+int(m)+int(k) != len(body) || !bytes.Equal(out, body) {
					t.Fatalf("raw %v: sent %d+%d+%d bytes (%v), received %d (equal %v)", raw, n, m, k, err1, len(out), bytes.Equal(out, body))
				}
				if wantEnd == io.EOF && err2 != nil || wantEnd != io.EOF && !sameEnd(err2, wantEnd, false) {
					t.Fatalf("raw %v: the send's end %v, want %v", raw, err2, wantEnd)
				}
				if _, err := b.Read(first); !sameEnd(err, wantEnd, false) {
					t.Fatalf("raw %v: read after the end: %v, want %v", raw, err, wantEnd)
				}
			})
		}
	}
}

func sameEnd(err, want error, eofIsNil bool) bool {
	if want == io.EOF {
		return err == io.EOF || (eofIsNil && err == nil)
	}
	_, corrupt := corrupt.IsBlob(err)
	return corrupt
}

// A damaged block header, and an archive cut short while a blob is sent,
// are one-line errors, not a panic nor a short blob taken for whole.
func TestRawBlobDamaged(t *testing.T) {
	head := bytes.Repeat([]byte("h"), 512)
	body := randomBytes(3*rawBlockSize, 9)
	desc := ocispec.Descriptor{Digest: digest.FromBytes(body), Size: int64(len(body))}

	f, z := rawArchive(t, head, body, true)
	b := NewRawBlob(io.LimitReader(z, desc.Size), z, desc, make([]byte, 1<<20))
	if _, err := b.Read(make([]byte, 100)); err != nil || b.cur == nil {
		t.Fatal(err)
	}
	// The second block's header: after the first block's content.
	hdrAt := b.cur.off + b.cur.blockLeft
	w, err := os.OpenFile(f.Name(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte{0xff, 0xff, 0xff}, hdrAt); err != nil {
		t.Fatal(err)
	}
	c, _ := tcpPair(t)
	if _, err := b.SendTo(c, -1); !errors.Is(err, corrupt.Err) {
		t.Fatalf("damaged block header: %v, want corrupt.Err", err)
	}
	c.Close()

	_, z = rawArchive(t, head, body, true)
	b = NewRawBlob(io.LimitReader(z, desc.Size), z, desc, make([]byte, 1<<20))
	if _, err := b.Read(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	f2 := b.f
	if err := os.Truncate(f2.Name(), b.cur.off+rawBlockSize); err != nil {
		t.Fatal(err)
	}
	c, got := tcpPair(t)
	n, err := b.SendTo(c, -1)
	c.Close()
	<-got
	if err == nil || n >= desc.Size-100 {
		t.Fatalf("archive cut short: sent %d of %d, err %v", n, desc.Size-100, err)
	}
	if _, err := b.Read(make([]byte, 10)); err == nil || err == io.EOF {
		t.Fatalf("read after a failed send: %v", err)
	}
	w.Close()
}
