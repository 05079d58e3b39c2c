package gitserver_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/ferrypkg/ferry/deploy/gitserver"
	"github.com/ferrypkg/ferry/internal/authlimit"
)

// fakeClock is the authlimit clock of a test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// clientFrom is an HTTP client whose connections come from ip (a loopback
// address: all of 127.0.0.0/8 is the local host).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
}

// TestAuthBackoff: wrong passwords from one address are answered 401,
// then 429 with Retry-After — the right password too — until the back-off
// ends; another address is not affected; once the back-off is over, the
// right password works and the slate is clean.
func TestAuthBackoff(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	_, bare := serve(t, lookupOf(repo), gitserver.WithAuthLimit(authlimit.Options{Free: 3, Base: 4 * time.Second, Now: clock.now}))
	refs := bare + "/info/refs?service=git-upload-pack"
	try := func(c *http.Client, user, pass string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, refs, nil)
		req.SetBasicAuth(user, pass)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	a, b := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	for i := range 4 {
		if code, _ := try(a, testUser, "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", i+1, code)
		}
	}
	for _, pass := range []string{"wrong", testPass} {
		code, retry := try(a, testUser, pass)
		if code != http.StatusTooManyRequests || retry != "4" {
			t.Errorf("password %q during the back-off: %d, Retry-After %q; want 429, 4", pass, code, retry)
		}
	}
	if code, _ := try(b, testUser, testPass); code != http.StatusOK {
		t.Errorf("another client, right password: %d, want 200", code)
	}
	if code, _ := try(b, testUser, "wrong"); code != http.StatusUnauthorized {
		t.Errorf("another client, wrong password: %d, want 401", code)
	}
	// Debian's git, from the throttled address, gives up on 429.
	if _, err := git(t, "", "ls-remote", strings.Replace(bare, "http://", "http://"+testUser+":"+testPass+"@", 1)); err == nil || !strings.Contains(err.Error(), "429") {
		t.Errorf("git ls-remote during the back-off: %v, want a 429 refusal", err)
	}
	clock.advance(5 * time.Second)
	if code, _ := try(a, testUser, testPass); code != http.StatusOK {
		t.Errorf("right password after the back-off: %d, want 200", code)
	}
	if code, _ := try(a, testUser, "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password after a success: %d, want 401 (the failures forgotten)", code)
	}
}

// TestHtpasswdReload: an htpasswd file that cannot be read, or is caught
// half-written, leaves the entries last read in force; one never read
// makes the server answer 503 (not 500: it is not the client's doing),
// which counts for no back-off.
func TestHtpasswdReload(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "htpasswd")
	line := func(user, pass string) string {
		h, _ := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
		return user + ":" + string(h) + "\n"
	}
	if err := os.WriteFile(path, []byte(line("alice", "a")+line("bob", "b")), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := gitserver.HtpasswdFile(path, 0)
	if err := auth(ctx, "alice", "a"); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(){
		"half-written": func() { os.WriteFile(path, []byte("bob:$2a$04$trunc"), 0o600) },
		"removed":      func() { os.Remove(path) },
	} {
		edit()
		if err := auth(ctx, "bob", "b"); err != nil {
			t.Errorf("%s: bob: %v, want the entries last read", name, err)
		}
		if err := auth(ctx, "bob", "x"); !errors.Is(err, gitserver.ErrUnauthorized) {
			t.Errorf("%s: wrong password: %v", name, err)
		}
	}
	os.WriteFile(path, []byte(line("carol", "c")), 0o600)
	if err := auth(ctx, "carol", "c"); err != nil {
		t.Errorf("after the file is whole again: %v", err)
	}
	if err := auth(ctx, "bob", "b"); !errors.Is(err, gitserver.ErrUnauthorized) {
		t.Errorf("bob, no longer in the file: %v", err)
	}

	// Never read: 503 with Retry-After.
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	srv, err := gitserver.New(lookupOf(repo), gitserver.WithAuth(gitserver.HtpasswdFile(filepath.Join(dir, "none"), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	req, _ := http.NewRequest(http.MethodGet, "/"+testKey+".git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("alice", "a")
	req.RemoteAddr = "127.0.0.1:1"
	for range 10 {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%d, Retry-After %q: want 503 and when to retry", rec.Code, rec.Header().Get("Retry-After"))
		}
	}
}

// TestHealthProbeNoSuccess: a health probe is answered without looking at
// credentials, so one that carries some is no successful sign-in: wrong
// passwords sent between probes with a made-up Authorization header still
// end in the back-off.
func TestHealthProbeNoSuccess(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	_, bare := serve(t, lookupOf(repo), gitserver.WithAuthLimit(authlimit.Options{Free: 3, Base: time.Minute}))
	host := strings.TrimSuffix(bare, "/"+testKey+".git")
	c := clientFrom("127.0.0.1")
	do := func(url, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.SetBasicAuth(testUser, pass)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var codes []int
	for range 10 {
		codes = append(codes, do(bare+"/info/refs?service=git-upload-pack", "guess"))
		if code := do(host+gitserver.PathHealth, "anything"); code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("health probe with credentials: %d", code)
		}
	}
	if codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Fatalf("10 wrong passwords, each followed by a health probe carrying credentials: %v; want 429 at the end", codes)
	}
	if code := do(host+gitserver.PathHealth, ""); code != http.StatusOK {
		t.Fatalf("health probe during the back-off: %d, want 200", code)
	}
}
