package registry_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
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

// TestParallelPushesNotRefused: pushes from one host at once, with the
// right password, are not refused however long their uploads take: an
// upload's password is checked before its bytes are read, and it counts
// no longer among the client's attempts in flight (16 pushes of 12 blobs
// at once, as many as ferry push sends of a package, the blobs held
// back for 2 s: 192 uploads open together).
func TestParallelPushesNotRefused(t *testing.T) {
	ts := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir(), HTPasswdFile: registrytest.Htpasswd(t, "alice", "s3cret")})
	host := registrytest.Host(ts)
	opts := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, auth.Credential{Username: "alice", Password: "s3cret"})}
	const pushes, blobs = 16, artifact.DefaultPushStreams + artifact.DefaultPushConcurrency
	gate := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(gate) })
	errs := make(chan error, pushes*blobs)
	var wg sync.WaitGroup
	for p := range pushes {
		repo, err := opts.Repository(fmt.Sprintf("%s/push%d:latest", host, p))
		if err != nil {
			t.Fatal(err)
		}
		for b := range blobs {
			data := []byte(fmt.Sprintf("push %d blob %d", p, b))
			desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: int64(len(data))}
			wg.Go(func() {
				// Not a bytes.Reader: a body that cannot be sent again, as
				// a push's from its archive.
				body := io.MultiReader(&heldBack{gate: gate}, bytes.NewReader(data))
				if err := repo.Blobs().Push(context.Background(), desc, body); err != nil {
					errs <- fmt.Errorf("push %d, blob %d: %w", p, b, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		failed = append(failed, err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d uploads refused, e.g. %v", len(failed), pushes*blobs, failed[0])
	}
}

// heldBack sends nothing until gate is closed.
type heldBack struct{ gate chan struct{} }

func (h *heldBack) Read([]byte) (int, error) {
	<-h.gate
	return 0, io.EOF
}
