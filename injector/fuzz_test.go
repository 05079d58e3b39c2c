package injector

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzServeConn feeds arbitrary bytes to one server connection: it must
// answer with well-formed HTTP/1.1 responses or close, never panic or hang.
func FuzzServeConn(f *testing.F) {
	img := newTestImage(f, 9, 100)
	dir := f.TempDir()
	img.writeDir(f, dir)
	srv, err := NewServer(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"GET /v2/ HTTP/1.1\r\n\r\n",
		"HEAD /v2/r/manifests/1.0.0 HTTP/1.1\r\nConnection: close\r\n\r\n",
		"GET /v2/r/blobs/" + img.layers[0] + " HTTP/1.1\r\nRange: bytes=5-\r\n\r\n",
		"GET /v2/r/tags/list?n=1&last=a HTTP/1.0\r\n\r\n",
		"PUT /v2/r/manifests/x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
		"GET /v2/a/b/c/blobs/sha256:zz HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		sc := &serverConn{s: srv, c: server}
		srv.mu.Lock()
		srv.conns[sc] = struct{}{}
		srv.wg.Add(1)
		srv.mu.Unlock()
		done := make(chan struct{})
		go func() { sc.serve(); close(done) }()
		var out bytes.Buffer
		readDone := make(chan struct{})
		go func() { io.Copy(&out, client); close(readDone) }()
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write(in)
		// Half-close is not available on a pipe: give the server a
		// moment, then close, which ends its read with EOF.
		time.Sleep(time.Millisecond)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("server connection did not end for %q", in)
		}
		<-readDone
		br := bufio.NewReader(&out)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if strings.HasPrefix(line, "HTTP/") && !strings.HasPrefix(line, "HTTP/1.1 ") {
				t.Fatalf("malformed status line %q", line)
			}
		}
	})
}
