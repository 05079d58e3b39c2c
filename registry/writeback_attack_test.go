package registry_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func openFDs(t *testing.T) int {
	t.Helper()
	// distribution leaves the file of an upload it refused for a stale
	// state to the collector (TestWritebackStaleState): let it run.
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestWritebackUploadsAttack: chunked uploads (PATCH, PATCH, PUT) resumed
// from the hash states the middleware stores, 1,000 uploads cancelled
// mid-way, concurrent PATCHes to one session, PATCHes with a stale
// session state, a repository named hashstates: every finished blob reads
// back whole, no file descriptor and no temporary is left.
func TestWritebackUploadsAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 uploads")
	}
	root := t.TempDir()
	srv := registrytest.NewServer(t, registry.Config{RootDir: root})
	client := srv.Client()
	do := func(method, u string, body []byte, hdr ...string) *http.Response {
		t.Helper()
		if !strings.HasPrefix(u, "http") {
			u = srv.URL + u
		}
		req, _ := http.NewRequest(method, u, bytes.NewReader(body))
		if body == nil {
			req.Body = nil
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	start := func(repo string) string {
		t.Helper()
		resp := do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("start: %d", resp.StatusCode)
		}
		loc, _ := resp.Location()
		return loc.String()
	}
	patch := func(loc string, b []byte, from int) (*http.Response, string) {
		resp := do(http.MethodPatch, loc, b, "Content-Type", "application/octet-stream",
			"Content-Range", fmt.Sprintf("%d-%d", from, from+len(b)-1))
		next, _ := resp.Location()
		if next == nil {
			return resp, ""
		}
		return resp, next.String()
	}
	finish := func(loc string, d digest.Digest) *http.Response {
		u, _ := url.Parse(loc)
		q := u.Query()
		q.Set("digest", d.String())
		u.RawQuery = q.Encode()
		return do(http.MethodPut, u.String(), nil)
	}
	before, goroutines := openFDs(t), runtime.NumGoroutine()
	t0 := time.Now()
	for i := range 1000 {
		loc := start("team/app")
		_, loc = patch(loc, bytes.Repeat([]byte{byte(i)}, 10_000), 0)
		if resp := do(http.MethodDelete, loc, nil); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("cancel %d: %d", i, resp.StatusCode)
		}
	}
	t.Logf("1,000 uploads started, patched, cancelled in %v", time.Since(t0))
	for _, repo := range []string{"team/app", "hashstates", "hashstates/sha256", "x/hashstates/y"} {
		for i := range 20 {
			data := bytes.Repeat([]byte(repo+fmt.Sprint(i)), 3000)
			d := digest.FromBytes(data)
			loc := start(repo)
			third := len(data) / 3
			resp, loc := patch(loc, data[:third], 0)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: patch 1: %d", repo, resp.StatusCode)
			}
			stale := loc
			resp, loc = patch(loc, data[third:2*third], third)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: patch 2: %d", repo, resp.StatusCode)
			}
			// A stale state (the first Location again) is refused.
			if resp, _ := patch(stale, data[third:], third); resp.StatusCode < 400 {
				t.Fatalf("%s: patch from a stale state: %d", repo, resp.StatusCode)
			}
			resp, loc = patch(loc, data[2*third:], 2*third)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: patch 3: %d", repo, resp.StatusCode)
			}
			if resp := finish(loc, d); resp.StatusCode != http.StatusCreated {
				t.Fatalf("%s: finish: %d", repo, resp.StatusCode)
			}
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v2/"+repo+"/blobs/"+d.String(), nil)
			gresp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			_, _ = got.ReadFrom(gresp.Body)
			gresp.Body.Close()
			if !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("%s: read back %d bytes, want %d", repo, got.Len(), len(data))
			}
		}
	}
	// Concurrent PATCHes to one session: whatever distribution answers,
	// nothing is left behind once the session is cancelled.
	loc := start("team/app")
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		locs []string
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPatch, loc, bytes.NewReader(bytes.Repeat([]byte{byte(i)}, 100_000)))
			req.Header.Set("Content-Type", "application/octet-stream")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				if next, err := resp.Location(); err == nil && resp.StatusCode == http.StatusAccepted {
					mu.Lock()
					locs = append(locs, next.String())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(locs) == 0 {
		t.Fatal("no concurrent PATCH accepted")
	}
	cancelled := 0
	for _, l := range locs {
		if resp := do(http.MethodDelete, l, nil); resp.StatusCode == http.StatusNoContent {
			cancelled++
		}
	}
	t.Logf("%d of 8 concurrent PATCHes accepted, %d cancels", len(locs), cancelled)
	client.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond)
	if after := openFDs(t); after > before+5 {
		ents, _ := os.ReadDir("/proc/self/fd")
		var what []string
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			what = append(what, l)
		}
		t.Errorf("%d file descriptors open before, %d after: %v", before, after, what)
	} else {
		t.Logf("%d file descriptors open before, %d after", before, after)
	}
	if g := runtime.NumGoroutine(); g > goroutines+10 {
		t.Errorf("%d goroutines before, %d after", goroutines, g)
	} else {
		t.Logf("%d goroutines before, %d after", goroutines, g)
	}
	var left []string
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && (strings.HasSuffix(p, ".tmp") || strings.Contains(p, "_uploads"+string(filepath.Separator))) {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("left in the storage: %d, %v", len(left), left[:min(8, len(left))])
	}
}

// TestWritebackStaleState: distribution does not close an upload it
// resumed for a request whose state is stale (its file descriptor stays
// open until the collector finds it); the middleware adds no second one:
// 50 such PATCHes hold at most 50 more descriptors, not 100.
func TestWritebackStaleState(t *testing.T) {
	srv := registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()})
	c := srv.Client()
	fds := func() int {
		e, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(e)
	}
	patch := func(loc string, b []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodPatch, loc, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp, err := c.Post(srv.URL+"/v2/a/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := resp.Location()
	patch(loc.String(), []byte("abc"))
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	before := fds()
	for range 50 {
		if resp := patch(loc.String(), []byte("def")); resp.StatusCode < 400 {
			t.Fatalf("a PATCH from a stale state: %d", resp.StatusCode)
		}
	}
	after := fds()
	t.Logf("50 PATCHes from a stale state: %d file descriptors before, %d after", before, after)
	if after > before+55 {
		t.Errorf("50 PATCHes from a stale state: %d file descriptors before, %d after", before, after)
	}
}
