package registry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log destination for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPanicIsA500: a panic in a handler (distribution's catalog walk had
// one) is answered 500 UNKNOWN with a log line at error level, where
// net/http dropped the connection and logged it only at debug level; when
// the response had begun, the connection is closed (the client sees a
// broken response, never a short one that looks whole) and it is logged.
func TestPanicIsA500(t *testing.T) {
	var logs lockedBuffer
	srv, err := New(context.Background(), Config{RootDir: t.TempDir()},
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	next := srv.handler
	srv.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/panic/before/tags/list":
			var repos []string
			_ = repos[len(r.URL.Path)] // index out of range
		case "/v2/panic/after/tags/list":
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("partial"))
			panic("after the headers")
		}
		next.ServeHTTP(w, r)
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()

	resp, err := http.Get(ts.URL + "/v2/panic/before/tags/list")
	if err != nil {
		t.Fatalf("panic before the response: %v, want a 500", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"UNKNOWN"`) {
		t.Fatalf("panic before the response: %s %s, want 500 UNKNOWN", resp.Status, body)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "index out of range") || !strings.Contains(l, "/v2/panic/before/tags/list") {
		t.Fatalf("log: %q, want an error line naming the panic and the path", l)
	}

	resp, err = http.Get(ts.URL + "/v2/panic/after/tags/list")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("panic after the headers: the response looked whole")
	}
	if !strings.Contains(logs.String(), "after the headers") {
		t.Fatalf("log: %q, want the second panic", logs.String())
	}

	// The registry still serves.
	if resp, err := http.Get(ts.URL + "/v2/"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/ after the panics: %v %v", resp, err)
	}
}
