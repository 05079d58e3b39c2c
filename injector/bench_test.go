package injector

import (
	"bufio"
	"context"
	"crypto/rand"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkBlobServe measures GET of a 64 MiB blob over loopback on a
// kept-alive connection; the MB/s column is the serving rate.
func BenchmarkBlobServe(b *testing.B) {
	const size = 64 << 20
	data := make([]byte, size)
	rand.Read(data)
	img := &testImage{files: map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": []byte(`{"schemaVersion":2,"manifests":[]}`),
	}}
	dgst := digestOf(data)
	img.files["blobs/sha256/"+dgst[7:]] = data
	base, _ := startServer(b, img)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReaderSize(c, 1<<20)
	buf := make([]byte, 1<<20)
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		io.WriteString(c, "GET /v2/r/blobs/"+dgst+" HTTP/1.1\r\nHost: x\r\n\r\n")
		n := -1
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if line == "\r\n" {
				break
			}
			if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if n != size {
			b.Fatalf("Content-Length %d", n)
		}
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(br, int64(n)), buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReassemble100MiB joins, verifies and extracts a 100 MiB payload
// in 512 KiB chunks (the default), as stage 1 does at start-up.
func BenchmarkReassemble100MiB(b *testing.B) {
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": []byte(`{"schemaVersion":2,"manifests":[]}`),
	}
	for i := range 4 {
		blob := make([]byte, 25<<20)
		rand.Read(blob)
		files["blobs/sha256/"+digestOf(blob)[7:]] = blob
		_ = i
	}
	payload := tarOf(b, files)
	dir := b.TempDir()
	chunks := filepath.Join(dir, "chunks")
	os.Mkdir(chunks, 0o755)
	n := writeChunks(b, chunks, payload, 512<<10)
	opts := ReassembleOptions{Dir: chunks, Count: n, Digest: digestOf(payload), Out: filepath.Join(dir, "out")}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for range b.N {
		if _, err := Reassemble(context.Background(), opts); err != nil {
			b.Fatal(err)
		}
	}
}
