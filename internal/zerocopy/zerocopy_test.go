package zerocopy_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// fileBody is a request body that sends a region of a file itself.
type fileBody struct {
	f        *os.File
	off, n   int64
	pos      int64
	sendCall int64 // the limit SendTo was given
}

func (b *fileBody) Read(p []byte) (int, error) {
	if b.pos >= b.n {
		return 0, io.EOF
	}
	k, err := b.f.ReadAt(p[:min(int64(len(p)), b.n-b.pos)], b.off+b.pos)
	b.pos += int64(k)
	return k, err
}

func (b *fileBody) Close() error { return nil }

func (b *fileBody) SendTo(c *net.TCPConn, limit int64) (int64, error) {
	b.sendCall = limit
	n := b.n - b.pos
	if limit >= 0 {
		n = min(n, limit)
	}
	k, err := zerocopy.SendFile(c, b.f, b.off+b.pos, n)
	b.pos += k
	return k, err
}

// Through a transport that dials with WrapDial, a Sender body is handed
// the connection (after net/http has read its first bytes, or before), and what
// arrives is the file's region; any other body goes as before, over the
// same kept-alive connection.
func TestWrapDialSender(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := openTemp(t, data)
	var got [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, b)
	}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: zerocopy.WrapDial(nil)}}

	const off, n = 12345, 2<<20 + 99
	body := &fileBody{f: f, off: off, n: n}
	req, _ := http.NewRequest(http.MethodPatch, srv.URL, body)
	req.ContentLength = n
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || !bytes.Equal(got[0], data[off:off+n]) {
		t.Fatalf("received %d bytes, want the file's %d at %d", len(got[0]), n, off)
	}
	if body.sendCall <= 0 || body.sendCall > n {
		t.Fatalf("SendTo was given limit %d: the body was not sent by the connection", body.sendCall)
	}

	resp, err = client.Post(srv.URL, "text/plain", bytes.NewReader([]byte("plain body")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 2 || string(got[1]) != "plain body" {
		t.Fatalf("plain body: %q", got[1:])
	}
}

// SendFile moves exactly the region asked for, and a file shorter than the
// region is an error, not a short success.
func TestSendFileShort(t *testing.T) {
	f := openTemp(t, bytes.Repeat([]byte("x"), 1000))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	recv := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			recv <- -1
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		recv <- len(b)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, err := zerocopy.SendFile(c.(*net.TCPConn), f, 100, 500)
	if n != 500 || err != nil {
		t.Fatalf("SendFile: %d, %v", n, err)
	}
	n, err = zerocopy.SendFile(c.(*net.TCPConn), f, 900, 500)
	if n != 100 || err == nil {
		t.Fatalf("SendFile past the end: %d, %v; want 100 and an error", n, err)
	}
	c.Close()
	if got := <-recv; got != 600 {
		t.Fatalf("received %d bytes, want 600", got)
	}
}
