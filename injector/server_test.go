package injector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startServer serves img on a loopback port and returns its base URL.
func startServer(t testing.TB, img *testImage, opts ...ServerOption) (string, *Server) {
	t.Helper()
	dir := t.TempDir()
	img.writeDir(t, dir)
	srv, err := NewServer(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-errc; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return "http://" + ln.Addr().String(), srv
}

func do(t *testing.T, method, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if method == "PUT" || method == "POST" || method == "PATCH" {
		req.Body = io.NopCloser(strings.NewReader("data"))
		req.ContentLength = 4
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return resp, b
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Errors []struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &e); err != nil || len(e.Errors) != 1 {
		t.Fatalf("not an OCI error body: %q (%v)", b, err)
	}
	return e.Errors[0].Code
}

func TestServer(t *testing.T) {
	img := newTestImage(t, 3, 1000, 300000)
	base, _ := startServer(t, img)
	layer := img.layers[1]
	layerBytes := img.files["blobs/sha256/"+layer[7:]]

	t.Run("base", func(t *testing.T) {
		for _, p := range []string{"/v2/", "/v2"} {
			resp, b := do(t, "GET", base+p)
			if resp.StatusCode != 200 || string(b) != "{}" || resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
				t.Fatalf("GET %s: %d %q %v", p, resp.StatusCode, b, resp.Header)
			}
		}
	})
	t.Run("manifest", func(t *testing.T) {
		for _, ref := range []string{"1.0.0", img.manifestDigest} {
			for _, method := range []string{"GET", "HEAD"} {
				resp, b := do(t, method, base+"/v2/ferry/registry/manifests/"+ref)
				if resp.StatusCode != 200 {
					t.Fatalf("%s %s: %d %s", method, ref, resp.StatusCode, b)
				}
				if got := resp.Header.Get("Content-Type"); got != "application/vnd.oci.image.manifest.v1+json" {
					t.Errorf("Content-Type %q", got)
				}
				if got := resp.Header.Get("Docker-Content-Digest"); got != img.manifestDigest {
					t.Errorf("Docker-Content-Digest %q", got)
				}
				if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(img.manifest)) {
					t.Errorf("Content-Length %q, want %d", got, len(img.manifest))
				}
				if method == "GET" && !bytes.Equal(b, img.manifest) {
					t.Errorf("body differs")
				}
				if method == "HEAD" && len(b) != 0 {
					t.Errorf("HEAD has a body")
				}
			}
		}
	})
	t.Run("blob", func(t *testing.T) {
		resp, b := do(t, "GET", base+"/v2/any/name/blobs/"+layer)
		if resp.StatusCode != 200 || !bytes.Equal(b, layerBytes) || resp.Header.Get("Docker-Content-Digest") != layer {
			t.Fatalf("GET blob: %d, %d bytes", resp.StatusCode, len(b))
		}
		resp, b = do(t, "HEAD", base+"/v2/any/name/blobs/"+layer)
		if resp.StatusCode != 200 || len(b) != 0 || resp.ContentLength != int64(len(layerBytes)) {
			t.Fatalf("HEAD blob: %d, %d", resp.StatusCode, resp.ContentLength)
		}
	})
	t.Run("range", func(t *testing.T) {
		n := len(layerBytes)
		for _, tc := range []struct {
			rng        string
			start, end int
		}{{"bytes=0-99", 0, 99}, {"bytes=1000-", 1000, n - 1}, {"bytes=-10", n - 10, n - 1}, {"bytes=5-999999999", 5, n - 1}} {
			resp, b := do(t, "GET", base+"/v2/r/blobs/"+layer, "Range", tc.rng)
			want := "bytes " + strconv.Itoa(tc.start) + "-" + strconv.Itoa(tc.end) + "/" + strconv.Itoa(n)
			if resp.StatusCode != 206 || resp.Header.Get("Content-Range") != want || !bytes.Equal(b, layerBytes[tc.start:tc.end+1]) {
				t.Errorf("%s: %d %q, %d bytes", tc.rng, resp.StatusCode, resp.Header.Get("Content-Range"), len(b))
			}
		}
		for _, rng := range []string{"bytes=" + strconv.Itoa(n) + "-", "bytes=5-2", "items=0-1", "bytes=0-1,3-4"} {
			resp, _ := do(t, "GET", base+"/v2/r/blobs/"+layer, "Range", rng)
			if resp.StatusCode != 416 {
				t.Errorf("%s: %d, want 416", rng, resp.StatusCode)
			}
		}
	})
	t.Run("not found", func(t *testing.T) {
		missing := digestOf([]byte("missing"))
		for _, tc := range []struct{ path, code string }{
			{"/v2/r/manifests/nope", "MANIFEST_UNKNOWN"},
			{"/v2/r/manifests/" + missing, "MANIFEST_UNKNOWN"},
			{"/v2/r/manifests/" + layer, "MANIFEST_UNKNOWN"}, // a blob, not a manifest
			{"/v2/r/blobs/" + missing, "BLOB_UNKNOWN"},
		} {
			resp, b := do(t, "GET", base+tc.path)
			if resp.StatusCode != 404 || errorCode(t, b) != tc.code || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: %d %s", tc.path, resp.StatusCode, b)
			}
			if resp, b := do(t, "HEAD", base+tc.path); resp.StatusCode != 404 || len(b) != 0 {
				t.Errorf("HEAD %s: %d", tc.path, resp.StatusCode)
			}
		}
	})
	t.Run("invalid", func(t *testing.T) {
		for _, tc := range []struct{ path, code string }{
			{"/v2/UPPER/manifests/1.0.0", "NAME_INVALID"},
			{"/v2/a//b/blobs/" + layer, "NAME_INVALID"},
			{"/v2/r/blobs/sha256:../../../etc/passwd", "DIGEST_INVALID"},
			{"/v2/r/manifests/sha256:abc", "DIGEST_INVALID"},
		} {
			resp, b := do(t, "GET", base+tc.path)
			if resp.StatusCode != 400 || errorCode(t, b) != tc.code {
				t.Errorf("%s: %d %s", tc.path, resp.StatusCode, b)
			}
		}
	})
	t.Run("writes", func(t *testing.T) {
		for _, tc := range []struct{ method, path string }{
			{"PUT", "/v2/r/manifests/1.0.0"}, {"POST", "/v2/r/blobs/uploads/"}, {"PATCH", "/v2/r/blobs/uploads/x"},
			{"DELETE", "/v2/r/manifests/" + img.manifestDigest}, {"DELETE", "/v2/r/blobs/" + layer},
		} {
			resp, b := do(t, tc.method, base+tc.path)
			if resp.StatusCode != 405 || errorCode(t, b) != "UNSUPPORTED" {
				t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
			}
		}
		// Still serving afterwards.
		if resp, _ := do(t, "GET", base+"/v2/"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	})
	t.Run("tags", func(t *testing.T) {
		resp, b := do(t, "GET", base+"/v2/ferry/registry/tags/list")
		if resp.StatusCode != 200 || string(b) != `{"name":"ferry/registry","tags":["1.0.0"]}` {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if _, b := do(t, "GET", base+"/v2/r/tags/list?n=0"); string(b) != `{"name":"r","tags":[]}` {
			t.Fatalf("n=0: %s", b)
		}
		if _, b := do(t, "GET", base+"/v2/r/tags/list?last=1.0.0"); string(b) != `{"name":"r","tags":[]}` {
			t.Fatalf("last: %s", b)
		}
	})
	t.Run("keep-alive and malformed", func(t *testing.T) {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\nHEAD /v2/ HTTP/1.1\r\n\r\nbogus\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		if got := strings.Count(string(b), "HTTP/1.1 200 OK"); got != 2 || !strings.Contains(string(b), "HTTP/1.1 400 Bad Request") {
			t.Fatalf("pipelined responses:\n%s", b)
		}
	})
}

func TestServerRepositories(t *testing.T) {
	img := newTestImage(t, 4, 10)
	base, _ := startServer(t, img, WithRepositories("ferry/registry"))
	if resp, _ := do(t, "GET", base+"/v2/ferry/registry/manifests/1.0.0"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	resp, b := do(t, "GET", base+"/v2/other/manifests/1.0.0")
	if resp.StatusCode != 404 || errorCode(t, b) != "NAME_UNKNOWN" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if _, err := NewServer(t.TempDir()); err == nil || !strings.Contains(err.Error(), "oci-layout") {
		t.Fatalf("NewServer on an empty dir: %v", err)
	}
}

func TestServerShutdownClosesIdle(t *testing.T) {
	img := newTestImage(t, 5, 10)
	dir := t.TempDir()
	img.writeDir(t, dir)
	srv, err := NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v2/ HTTP/1.1\r\n\r\n")
	buf := make([]byte, 4096)
	c.Read(buf) // response; connection now idle
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("idle connection not closed: %v", err)
	}
}

// TestServerShutdownFinishesInFlight: a download in progress when
// Shutdown starts completes, then the connection closes.
func TestServerShutdownFinishesInFlight(t *testing.T) {
	img := newTestImage(t, 6, 64<<20)
	dir := t.TempDir()
	img.writeDir(t, dir)
	srv, _ := NewServer(dir)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v2/r/blobs/"+img.layers[0]+" HTTP/1.1\r\n\r\n")
	head := make([]byte, 64)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a download was in flight", err)
	default:
	}
	rest, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	all := append(head, rest...)
	i := bytes.Index(all, []byte("\r\n\r\n"))
	if i < 0 || len(all)-i-4 != 64<<20 {
		t.Fatalf("download cut short: %d body bytes", len(all)-i-4)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
}
