package registry

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/auth"
)

type denyAll struct{}

func (denyAll) Authorized(*http.Request, ...auth.Access) (*auth.Grant, error) {
	return nil, auth.ErrAuthenticationFailure
}

// A request that may not push reserves no room: before, an anonymous
// PATCH declaring Content-Length 2^62 counted 2^62 bytes in flight while
// distribution answered it 401 (every push of the registry was refused
// 507 meanwhile, and two such requests at once overflowed the total).
func TestSpaceGuardUnauthorizedReservesNothing(t *testing.T) {
	var seen []int64
	var mu sync.Mutex
	g := &spaceGuard{root: t.TempDir(), access: denyAll{}}
	g.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, g.inFlight.Load())
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	})
	for _, n := range []int64{1 << 62, 1<<63 - 1} {
		r := httptest.NewRequest(http.MethodPatch, "/v2/a/b/blobs/uploads/x", strings.NewReader("x"))
		r.ContentLength = n
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, r)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("Content-Length %d: status %d, want distribution's 401", n, rec.Code)
		}
	}
	for i, v := range seen {
		if v != 0 {
			t.Errorf("request %d: %d bytes reserved in flight by a request that may not push", i, v)
		}
	}
}

// An upload whose client stops sending gives its reserved room back once
// it has sent nothing for the stall time: before, a client that declared
// a Content-Length and then held the connection open kept that room
// reserved for as long as it liked (the server has no read timeout, as
// pushes of many GiB are slow), refusing every other push 507.
func TestSpaceGuardStalledUploadReleases(t *testing.T) {
	g := &spaceGuard{root: t.TempDir(), stall: 200 * time.Millisecond}
	done := make(chan error, 1)
	g.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		done <- err
		w.WriteHeader(http.StatusBadRequest)
	})
	srv := httptest.NewServer(g)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PATCH /v2/a/blobs/uploads/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n0123456789"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the stalled body read to its end")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("after 5s of a stalled upload, %d bytes still reserved", g.inFlight.Load())
	}
	deadline := time.Now().Add(2 * time.Second)
	for g.inFlight.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v := g.inFlight.Load(); v != 0 {
		t.Fatalf("%d bytes still reserved after the stalled upload ended", v)
	}
	t.Logf("stalled upload ended and its room released after %v", time.Since(start).Round(time.Millisecond))
}

// Uploads checked at once cannot together reserve more than the room:
// the check and the count are one step.
func TestSpaceGuardReserveAtOnce(t *testing.T) {
	var g spaceGuard
	const free, floor, need = 100 << 20, 1 << 20, 10 << 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.reserve(free, floor, need) {
				mu.Lock()
				accepted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if accepted != 9 || g.inFlight.Load() != 9*need {
		t.Fatalf("%d uploads of 10 MiB accepted (%d bytes in flight) with 99 MiB above the floor, want 9", accepted, g.inFlight.Load())
	}
	if g.reserve(0, floor, 1<<63-1) {
		t.Fatal("an upload of 2^63-1 bytes fit in no room")
	}
}
