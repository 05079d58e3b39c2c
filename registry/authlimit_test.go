package registry_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (another client, as the registry sees it).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// TestPasswordGuessingSlowed: wrong passwords from one client are refused
// with 401 a few times, then answered 429 with Retry-After without being
// checked (the right one too, while it waits); a client at another address
// still gets in with the right password, and one without credentials still
// gets its 401 challenge.
func TestPasswordGuessingSlowed(t *testing.T) {
	ts := registrytest.NewServer(t, registry.Config{HTPasswdFile: registrytest.Htpasswd(t, "alice", "s3cret")})
	get := func(c *http.Client, user, pass string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v2/", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	guesser := clientFrom("127.0.0.1")
	var codes []int
	for i := range 12 {
		codes = append(codes, get(guesser, "alice", "guess"+strconv.Itoa(i)).StatusCode)
	}
	if codes[0] != http.StatusUnauthorized {
		t.Fatalf("first wrong password: %d, want 401", codes[0])
	}
	resp := get(guesser, "alice", "s3cret")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after 12 wrong passwords (%v): %s, Retry-After %q; want 429 with Retry-After", codes, resp.Status, resp.Header.Get("Retry-After"))
	}
	if codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Fatalf("wrong passwords answered %v, want 429 at the end", codes)
	}
	other := clientFrom("127.0.0.2")
	if resp := get(other, "alice", "s3cret"); resp.StatusCode != http.StatusOK {
		t.Fatalf("right password from another client: %s, want 200", resp.Status)
	}
	if resp := get(other, "", ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no credentials: %s, want 401 with a challenge", resp.Status)
	}
}

// TestCredentialsBeforeBody: a write with wrong or no credentials is
// answered 401 before its body is read: a stranger cannot make the
// registry read what it sends into memory, a manifest (4 MiB) or a form
// (10 MiB, and more to parse it, as distribution's FormValue would).
func TestCredentialsBeforeBody(t *testing.T) {
	ts := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir(), HTPasswdFile: registrytest.Htpasswd(t, "alice", "s3cret")})
	d := digest.FromString("x")
	for i, tc := range []struct{ method, path, contentType string }{
		{http.MethodPut, "/v2/foo/manifests/latest", ocispec.MediaTypeImageManifest},
		{http.MethodPut, "/v2/foo/manifests/" + digest.SHA512.FromString("x").String(), ocispec.MediaTypeImageManifest},
		{http.MethodPost, "/v2/foo/blobs/uploads/", "application/x-www-form-urlencoded"},
		{http.MethodPost, "/v2/foo/blobs/uploads/?mount=" + d.String() + "&from=bar", "multipart/form-data; boundary=x"},
		{http.MethodPost, "/v2/foo/blobs/uploads/?digest=" + d.String(), "application/octet-stream"},
		{http.MethodPut, "/v2/foo/blobs/uploads/x?digest=" + d.String(), "application/x-www-form-urlencoded"},
		{http.MethodPut, "/v2/foo/blobs/uploads/x?digest=" + d.String(), "application/octet-stream"},
	} {
		for j, pass := range []string{"", "wrong"} {
			// 300 KiB of an 8 MiB body, then nothing: more than net/http
			// reads of a body left unread before it answers (256 KiB),
			// less than a manifest or a form.
			conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 3, byte(1+2*i+j))}}).Dial("tcp", ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
			req.Header.Set("Content-Type", tc.contentType)
			req.Header.Set("Content-Length", "8388608")
			if pass != "" {
				req.SetBasicAuth("alice", pass)
			}
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, req.URL.RequestURI(), req.Host)
			req.Header.Write(conn)
			io.WriteString(conn, "\r\n")
			conn.Write(make([]byte, 300<<10))
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), req)
			if err != nil {
				t.Errorf("%s %s (%s), password %q: %v; want 401 before the body", tc.method, tc.path, tc.contentType, pass, err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s (%s), password %q: %s, want 401", tc.method, tc.path, tc.contentType, pass, resp.Status)
			}
		}
	}
}
