package registry_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

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
