package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
)

// pkt is one pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

const someHash = "0123456789abcdef0123456789abcdef01234567"

// endlessRefs writes refs/heads/bNNN lines until the client hangs up or
// limit bytes went, then a flush: a server listing refs without end (the
// limit keeps a test that fails from taking the machine's memory).
func endlessRefs(w http.ResponseWriter, r *http.Request, sent *atomic.Int64, limit int64) {
	var b strings.Builder
	for i := 0; sent.Load() < limit && r.Context().Err() == nil; i++ {
		b.WriteString(pkt(fmt.Sprintf("%s refs/heads/b%09d\n", someHash, i)))
		if b.Len() >= 64<<10 {
			n, err := io.WriteString(w, b.String())
			sent.Add(int64(n))
			if err != nil {
				return
			}
			b.Reset()
		}
	}
	io.WriteString(w, b.String()+"0000")
}

// hostileGitServer serves r.git: for protocol v0, an advertisement (service
// line, flush, HEAD with capabilities) followed by endless refs; for v2, a
// capability advertisement, then endless refs in the ls-refs answer.
func hostileGitServer(t *testing.T, v2 bool, sent *atomic.Int64) string {
	t.Helper()
	limit := 3 * maxRefList
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/r.git/info/refs":
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			io.WriteString(w, pkt("# service=git-upload-pack\n")+"0000")
			if v2 {
				io.WriteString(w, pkt("version 2\n")+pkt("agent=git/2.43.0\n")+pkt("ls-refs\n")+pkt("fetch=shallow\n")+pkt("object-format=sha1\n")+"0000")
				return
			}
			io.WriteString(w, pkt(someHash+" HEAD\x00multi_ack thin-pack side-band side-band-64k ofs-delta shallow no-progress include-tag symref=HEAD:refs/heads/main agent=git/2.43.0\n"))
			endlessRefs(w, r, sent, limit)
		case r.Method == http.MethodPost && r.URL.Path == "/r.git/git-upload-pack" && v2:
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if !strings.Contains(string(body), "command=ls-refs") {
				http.Error(w, "no", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			io.WriteString(w, pkt(someHash+" HEAD symref-target:refs/heads/main\n"))
			endlessRefs(w, r, sent, limit)
		default:
			http.Error(w, "no", http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/r.git"
}

// A server listing refs without end (in info/refs, or in protocol v2's
// ls-refs answer) is refused once the list passes artifact.MaxGitRefList,
// in one line naming the repository (its token masked) and the limit.
func TestCloneEndlessRefsRefused(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			var sent atomic.Int64
			u := hostileGitServer(t, v2, &sent)
			u = strings.Replace(u, "http://", "http://tok3n@", 1)
			start := time.Now()
			_, err := Open(context.Background(), Source{URL: u, CloneDir: t.TempDir(), Ref: "main"}, nil)
			took := time.Since(start)
			if err == nil {
				t.Fatal("cloned")
			}
			msg := err.Error()
			want := fmt.Sprintf("clone %s: the git server's list of refs passed its limit of 32 MiB", strings.Replace(u, "tok3n", "xxxxx", 1))
			if !errors.Is(err, ErrRefList) || msg != want {
				t.Fatalf("error %q, want %q", msg, want)
			}
			if n := sent.Load(); n > maxRefList+8<<20 {
				t.Errorf("read %d bytes of refs, more than the limit of %d and what was in flight", n, maxRefList)
			}
			if took > 20*time.Second {
				t.Errorf("refused in %v", took)
			}
			t.Logf("refused in %v after %d MiB sent: %s", took.Round(time.Millisecond), sent.Load()>>20, msg)
		})
	}
}

// A server that answers nothing, or starts the pack and stops, is given
// up once it sent too little over the stall window.
func TestCloneStallRefused(t *testing.T) {
	defer func(w time.Duration) { stallWindow = w }(stallWindow)
	stallWindow = time.Second
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"no answer", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"refs then a stalled pack", func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
				io.WriteString(w, pkt("# service=git-upload-pack\n")+"0000"+
					pkt(someHash+" HEAD\x00multi_ack side-band-64k ofs-delta symref=HEAD:refs/heads/main\n")+
					pkt(someHash+" refs/heads/main\n")+"0000")
				return
			}
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			io.WriteString(w, pkt("NAK\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			start := time.Now()
			_, err := Open(context.Background(), Source{URL: srv.URL + "/r.git", CloneDir: t.TempDir(), Ref: "main"}, nil)
			if err == nil || !errors.Is(err, artifact.ErrStalled) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v, want a one-line error wrapping %v", err, artifact.ErrStalled)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("given up in %v, the window is %v", took, stallWindow)
			}
			t.Logf("%v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}
