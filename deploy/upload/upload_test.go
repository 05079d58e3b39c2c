package upload

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOptionsQuery(t *testing.T) {
	in := Options{Components: []string{"a", "b"}, Set: []string{"x=1", "y=a,b"}, Timeout: 90 * time.Second, NoWait: true, Source: "app-1.0.tar.zst"}
	out, err := ParseOptions(in.query())
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("ParseOptions(query(%+v)) = %+v, %v", in, out, err)
	}
	for _, q := range []string{"timeout=soon", "timeout=-1s", "wait=maybe", "source=a%2Fb", "source=a%0Ab"} {
		r := httptest.NewRequest(http.MethodPost, Path+"?"+q, nil)
		if _, err := ParseOptions(r.URL.Query()); err == nil {
			t.Errorf("ParseOptions(%s): no error", q)
		}
	}
	// A value of 1 MiB is named in short.
	long := strings.Repeat("a", 1<<20)
	for _, key := range []string{"timeout", "wait", "source"} {
		_, err := ParseOptions(url.Values{key: {long}})
		if err == nil || len(err.Error()) > 512 || !strings.HasPrefix(err.Error(), key+" ") {
			t.Errorf("ParseOptions(%s=<1 MiB>): %.200v, want at most 512 bytes naming %s", key, err, key)
		}
	}
}

// The refusals that come before the API server is asked: the method, a
// missing token.
func TestServeRefusesBeforeReviews(t *testing.T) {
	s := &Server{Namespace: "ferry"}
	for _, tc := range []struct {
		method, auth string
		want         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, "", http.StatusUnauthorized},
		{http.MethodPost, "Basic dTpw", http.StatusUnauthorized},
		{http.MethodPost, "Bearer  ", http.StatusUnauthorized},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(tc.method, Path, strings.NewReader("x"))
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		s.ServeHTTP(rec, r)
		body := rec.Body.String()
		if rec.Code != tc.want || strings.Count(body, "\n") != 1 {
			t.Errorf("%s with %q: %d %q, want %d and one line", tc.method, tc.auth, rec.Code, body, tc.want)
		}
		if tc.want == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("401 without WWW-Authenticate")
		}
		// The client's reading of it.
		_, err := ReadEvents(rec.Result(), nil)
		var refused *Refused
		if !errors.As(err, &refused) || refused.Status != tc.want || refused.Message != strings.TrimSpace(body) {
			t.Errorf("ReadEvents: %v", err)
		}
	}
}

// spool writes the body to a file in constant memory, and refuses what is
// too large, empty, or stalls.
func TestSpool(t *testing.T) {
	dir := t.TempDir()
	s := &Server{Dir: dir, MaxBytes: 1 << 20, IdleTimeout: 300 * time.Millisecond}
	var got struct {
		path string
		size int64
		err  error
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path, got.size, got.err = s.spool(w, r)
		if got.path != "" {
			defer os.Remove(got.path)
		}
		if got.err == nil {
			b, _ := os.ReadFile(got.path)
			if int64(len(b)) != got.size {
				t.Errorf("spooled %d bytes, file has %d", got.size, len(b))
			}
		}
	}))
	defer srv.Close()
	post := func(body string) {
		resp, err := http.Post(srv.URL, "application/octet-stream", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}
	post(strings.Repeat("a", 1000))
	if got.err != nil || got.size != 1000 {
		t.Fatalf("spool of 1000 bytes: %d, %v", got.size, got.err)
	}
	post(strings.Repeat("a", 2<<20))
	var he *httpError
	if !errors.As(got.err, &he) || he.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("spool of 2 MiB with a 1 MiB bound: %v", got.err)
	}
	post("")
	if !errors.As(got.err, &he) || he.status != http.StatusBadRequest {
		t.Fatalf("spool of nothing: %v", got.err)
	}
	// A body that stalls.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("start"))
		time.Sleep(2 * time.Second)
		pw.Close()
	}()
	resp, err := http.Post(srv.URL, "application/octet-stream", pr)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.As(got.err, &he) || he.status != http.StatusRequestTimeout {
		t.Fatalf("spool of a stalled body: %v", got.err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("spool left %d files", len(left))
	}
}

// A stream of events ends in the result, or in the error.
func TestReadEvents(t *testing.T) {
	stream := func(lines ...string) *http.Response {
		rec := httptest.NewRecorder()
		rec.WriteHeader(http.StatusOK)
		for _, l := range lines {
			rec.Body.WriteString(l + "\n")
		}
		return rec.Result()
	}
	var seen []string
	res, err := ReadEvents(stream(
		`{"phase":"received","bytes":5}`,
		`{"phase":"condition","condition":{"type":"Ready","status":"True","reason":"Installed","message":"m","lastTransitionTime":null}}`,
		`{"phase":"done","result":{"name":"p","ready":"True"}}`,
	), func(e Event) { seen = append(seen, e.Phase) })
	if err != nil || res.Name != "p" || len(seen) != 3 {
		t.Fatalf("ReadEvents: %+v %v %v", res, err, seen)
	}
	_, err = ReadEvents(stream(`{"phase":"pushing"}`, `{"phase":"error","error":"push images to x: boom"}`), nil)
	var refused *Refused
	if !errors.As(err, &refused) || refused.Message != "push images to x: boom" || err.Error() != "the agent: push images to x: boom" {
		t.Fatalf("ReadEvents of an error: %v", err)
	}
	if _, err := ReadEvents(stream(`{"phase":"pushing"}`), nil); err == nil {
		t.Fatal("ReadEvents of a stream cut short: no error")
	}
}
