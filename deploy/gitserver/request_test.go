package gitserver_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/gitserver"
)

// pkt encodes lines as pkt-lines: "" is a flush-pkt, "\x01" a delim-pkt;
// other lines get their newline.
func pkt(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		switch l {
		case "":
			b.WriteString("0000")
		case "\x01":
			b.WriteString("0001")
		default:
			fmt.Fprintf(&b, "%04x%s\n", len(l)+5, l)
		}
	}
	return b.String()
}

// postUploadPack sends body to the repository's upload-pack.
func postUploadPack(t *testing.T, url, version, contentType string, body []byte, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/git-upload-pack", bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if version != "" {
		req.Header.Set("Git-Protocol", version)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const uploadPackRequest = "application/x-git-upload-pack-request"

// TestOddRequests: upload-pack requests that git's grammar does not allow,
// or that ask for what this server does not have or offer, get 400 (415
// for another content type, 413 when too large) with a message that names
// what is wrong; never 500, never a hang.
func TestOddRequests(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	url, _ := serve(t, lookupOf(repo))
	head := src.second
	missing := strings.Repeat("ab", 20)
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	type tc struct {
		name, version, body string
		code                int
		want                string
	}
	cases := []tc{
		{"empty body", "", "", 400, "empty request"},
		{"short length", "", "00", 400, "truncated length"},
		{"not hex", "", "zzzzwant", 400, "not 4 hex digits"},
		{"length 3", "", "0003", 400, "empty or invalid"},
		{"empty line", "", "0004", 400, "empty or invalid"},
		{"too long", "", "ffff" + strings.Repeat("a", 100), 400, "longer than 65520"},
		{"length past the end", "", "0100want", 400, "the body ends after"},
		{"unknown want", "", pkt("want "+missing+" multi_ack", "", "done"), 400, "not our ref"},
		{"short want", "", pkt("want abc", "", "done"), 400, "not an object id"},
		{"upper-case want", "", pkt("want "+strings.ToUpper(head), "", "done"), 400, "not an object id"},
		{"not a want", "", pkt("have "+head, "", "done"), 400, "unexpected line"},
		{"bad capability", "", pkt("want "+head+" side-band-64k BAD!", "", "done"), 400, "capability \"BAD!\": malformed"},
		{"capability value", "", pkt("want "+head+" ofs-delta=yes", "", "done"), 400, "takes no value"},
		{"sha256", "", pkt("want "+head+" object-format=sha256", "", "done"), 400, "object format is sha1"},
		{"deepen 0", "", pkt("want "+head, "deepen 0", ""), 400, "want a depth"},
		{"deepen -1", "", pkt("want "+head, "deepen -1", ""), 400, "want a depth"},
		{"deepen huge", "", pkt("want "+head, "deepen 99999999999", ""), 400, "want a depth"},
		{"deepen twice", "", pkt("want "+head, "deepen 1", "deepen 2", ""), 400, "second deepen"},
		{"deepen-since v0", "", pkt("want "+head, "deepen-since 1", ""), 400, "protocol v2 offers it"},
		{"filter v0", "", pkt("want "+head, "filter blob:none", ""), 400, "partial clones"},
		{"want after deepen", "", pkt("want "+head, "deepen 1", "want "+head, ""), 400, "want after"},
		{"no flush", "", pkt("want " + head), 400, "ends before the flush-pkt"},
		{"haves unended", "", pkt("want "+head, "", "have "+head), 400, "ends before the flush-pkt or done"},
		{"after done", "", pkt("want "+head, "", "done", "have "+head), 400, "data after the done"},
		{"delim in v0", "", pkt("want "+head, "\x01", ""), 400, "delim-pkt"},
		{"bad have", "", pkt("want "+head, "", "have xyz", "done"), 400, "not an object id"},
		{"junk after flush", "", pkt("", "want "+head), 400, "data after the flush-pkt"},

		{"v2 empty", "version=2", "", 400, "empty request"},
		{"v2 no command", "version=2", pkt("agent=x", ""), 400, "want command="},
		{"v2 unknown command", "version=2", pkt("command=object-info", ""), 400, "not offered"},
		{"v2 bad capability", "version=2", pkt("command=fetch", "server-option=x", "\x01", ""), 400, "not offered"},
		{"v2 sha256", "version=2", pkt("command=fetch", "object-format=sha256", "\x01", ""), 400, "sha1"},
		{"v2 unknown want", "version=2", pkt("command=fetch", "\x01", "want "+missing, "done", ""), 400, "not our ref"},
		{"v2 bad arg", "version=2", pkt("command=fetch", "\x01", "want "+head, "sideband", ""), 400, "unexpected"},
		{"v2 filter", "version=2", pkt("command=fetch", "\x01", "want "+head, "filter blob:none", ""), 400, "partial clones"},
		{"v2 want-ref", "version=2", pkt("command=fetch", "\x01", "want-ref refs/heads/main", ""), 400, "not offered"},
		{"v2 deepen and since", "version=2", pkt("command=fetch", "\x01", "want "+head, "deepen 1", "deepen-since 5", ""), 400, "cannot be combined"},
		{"v2 deepen-not unknown", "version=2", pkt("command=fetch", "\x01", "want "+head, "deepen-not refs/heads/nope", ""), 400, "no such ref"},
		{"v2 deepen-since junk", "version=2", pkt("command=fetch", "\x01", "want "+head, "deepen-since soon", ""), 400, "seconds since the epoch"},
		{"v2 no flush", "version=2", pkt("command=fetch", "\x01", "want "+head), 400, "ends before the flush-pkt"},
		{"v2 after flush", "version=2", pkt("command=ls-refs", "\x01", "", "command=fetch"), 400, "data after the flush-pkt"},
		{"v2 ls-refs arg", "version=2", pkt("command=ls-refs", "\x01", "everything", ""), 400, "not offered"},
		{"v2 response-end", "version=2", pkt("command=fetch") + "0002", 400, "response-end-pkt"},
		{"v2 data in caps", "version=2", pkt("command=fetch", "want "+head, ""), 400, "not offered"},

		{"flush only", "", pkt(""), 200, ""},
		{"round without done", "", pkt("want "+head+" side-band-64k", ""), 200, ""},
		{"round with haves", "", pkt("want "+head+" multi_ack_detailed", "", "have "+src.first, ""), 200, "ACK " + src.first},
		{"v2 flush only", "version=2", pkt(""), 200, ""},
		{"v2 fetch, no arguments", "version=2", pkt("command=fetch", ""), 200, ""},
		{"v2 ls-refs, no arguments", "version=2", pkt("command=ls-refs", ""), 200, head + " refs/heads/main"},
		{"unknown version", "version=3", pkt("want "+head, "", "done"), 200, "PACK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := postUploadPack(t, url, c.version, uploadPackRequest, []byte(c.body))
			if code != c.code || !strings.Contains(body, c.want) {
				t.Errorf("%d %.200q, want %d with %q", code, body, c.code, c.want)
			}
		})
	}
	t.Run("content type", func(t *testing.T) {
		code, body := postUploadPack(t, url, "", "text/plain", []byte(pkt("want "+head, "", "done")))
		if code != http.StatusUnsupportedMediaType || !strings.Contains(body, uploadPackRequest) {
			t.Errorf("%d %q, want 415 naming %s", code, body, uploadPackRequest)
		}
	})
	t.Run("not gzip", func(t *testing.T) {
		code, body := postUploadPack(t, url, "", uploadPackRequest, []byte("plain"), "Content-Encoding", "gzip")
		if code != http.StatusBadRequest || !strings.Contains(body, "gzip") {
			t.Errorf("%d %q, want 400", code, body)
		}
	})
	t.Run("gzip truncated", func(t *testing.T) {
		b := gz(pkt("want "+head, "", "done"))
		code, body := postUploadPack(t, url, "", uploadPackRequest, b[:len(b)-6], "Content-Encoding", "gzip")
		if code != http.StatusBadRequest {
			t.Errorf("%d %q, want 400", code, body)
		}
	})
	t.Run("gzip bomb", func(t *testing.T) {
		code, body := postUploadPack(t, url, "", uploadPackRequest, gz(strings.Repeat("0", 64<<20)), "Content-Encoding", "gzip")
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("%d %q, want 413", code, body)
		}
	})
	t.Run("encoding", func(t *testing.T) {
		code, body := postUploadPack(t, url, "", uploadPackRequest, []byte(pkt("")), "Content-Encoding", "br")
		if code != http.StatusBadRequest || !strings.Contains(body, "Content-Encoding") {
			t.Errorf("%d %q, want 400", code, body)
		}
	})
	t.Run("long encoding", func(t *testing.T) {
		// Half of what a server reads of a request's headers: the refusal
		// names the encoding in short.
		code, body := postUploadPack(t, url, "", uploadPackRequest, []byte(pkt("")), "Content-Encoding", strings.Repeat("x", 512<<10))
		if code != http.StatusBadRequest || !strings.Contains(body, "Content-Encoding") || len(body) > 512 {
			t.Errorf("%d %.200q (%d bytes), want 400 of at most 512 bytes naming Content-Encoding", code, body, len(body))
		}
	})
	t.Run("gzip ok", func(t *testing.T) {
		code, body := postUploadPack(t, url, "", uploadPackRequest, gz(pkt("want "+head, "", "done")), "Content-Encoding", "gzip")
		if code != http.StatusOK || !strings.Contains(body, "PACK") {
			t.Errorf("%d %.100q, want a pack", code, body)
		}
	})
}

// TestFetchNegotiation: a client holding the first commit fetches the
// second, over protocol v0, v1 and v2: its haves are negotiated, and it
// gets what it lacks.
func TestFetchNegotiation(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	url, _ := serve(t, lookupOf(repo))
	// A repository with the first commit only.
	old := filepath.Join(t.TempDir(), "old.git")
	mustGit(t, "", "clone", "-q", "--bare", "--no-local", src.dir, old)
	mustGit(t, old, "update-ref", "refs/heads/main", src.first)
	mustGit(t, old, "tag", "-d", "v1")
	mustGit(t, old, "reflog", "expire", "--expire=now", "--all")
	mustGit(t, old, "gc", "-q", "--prune=now")
	for _, proto := range []string{"0", "1", "2"} {
		t.Run("v"+proto, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "clone")
			mustGit(t, "", "clone", "-q", "--no-local", old, dst)
			if _, err := git(t, dst, "cat-file", "-e", src.second); err == nil {
				t.Fatal("the client already has the second commit")
			}
			mustGit(t, dst, "-c", "protocol.version="+proto, "fetch", "-q", url, "main")
			if got := mustGit(t, dst, "rev-parse", "FETCH_HEAD"); got != src.second {
				t.Errorf("FETCH_HEAD = %s, want %s", got, src.second)
			}
			mustGit(t, dst, "fsck", "--no-progress")
		})
	}
}

// TestKeepAlive: the deadlines an upload-pack sets on its connection do
// not outlive it: a later request on the same kept-alive connection, past
// the first one's time bound, is answered.
func TestKeepAlive(t *testing.T) {
	src := makeSource(t)
	repo, _ := carried(t, src, "main")
	url, _ := serve(t, lookupOf(repo), gitserver.WithTimeout(time.Second))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	var conns int
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPost, url+"/git-upload-pack", strings.NewReader(pkt("want "+src.second, "", "done")))
		req.Header.Set("Content-Type", uploadPackRequest)
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				conns++
			}
		}}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Contains(b, []byte("PACK")) {
			t.Fatalf("request %d: %s, %v, %.80q", i+1, resp.Status, err, b)
		}
		time.Sleep(1500 * time.Millisecond)
	}
	if conns != 1 {
		t.Errorf("%d connections, want 1 kept alive", conns)
	}
}
