package gitserver_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/gitserver"
)

// FuzzUploadPack sends what the fuzzer makes to a real Server (over
// HTTP, a small repository made by Debian's git) as an upload-pack
// request, protocol v0, v1 or v2, plain or gzip'd: whatever it is, the
// answer is never a 5xx, never a panic (a dropped connection), and comes
// in bounded time.
func FuzzUploadPack(f *testing.F) {
	src := makeSource(f)
	repo, _ := carried(f, src, "v1")
	// (The test log may not be written from inside the fuzz function.)
	url, _ := serve(f, lookupOf(repo), gitserver.WithLogger(slog.New(slog.DiscardHandler)))
	head, first := src.second, src.first

	// Seeds: what Debian's git sends, and odd requests.
	f.Add(uint8(0), false, []byte(pkt("want "+head+" multi_ack_detailed no-done side-band-64k thin-pack ofs-delta deepen-since deepen-not agent=git/2.39.5", "", "done")))
	f.Add(uint8(0), false, []byte(pkt("want "+head+" multi_ack_detailed side-band-64k ofs-delta shallow agent=git/2.39.5", "deepen 1", "")))
	f.Add(uint8(1), false, []byte(pkt("want "+head+" multi_ack side-band ofs-delta", "want "+src.tagObject, "shallow "+first, "deepen 2", "", "have "+first, "")))
	f.Add(uint8(2), false, []byte(pkt("command=ls-refs", "agent=git/2.39.5", "object-format=sha1", "\x01", "peel", "symrefs", "unborn", "ref-prefix HEAD", "ref-prefix refs/heads/", "")))
	f.Add(uint8(2), false, []byte(pkt("command=fetch", "agent=git/2.39.5", "object-format=sha1", "\x01", "thin-pack", "ofs-delta", "deepen 1", "want "+head, "want "+head, "done", "")))
	f.Add(uint8(2), false, []byte(pkt("command=fetch", "\x01", "want "+head, "have "+first, "have "+strings.Repeat("1", 40), "")))
	f.Add(uint8(2), true, []byte(pkt("command=fetch", "\x01", "want "+src.tagObject, "include-tag", "shallow "+first, "deepen-relative", "deepen 1", "done", "")))
	f.Add(uint8(2), false, []byte(pkt("command=fetch", "\x01", "want "+head, "deepen-since 1704164705", "deepen-not refs/tags/v1", "done", "")))
	f.Add(uint8(0), false, []byte("0032want "+head+"\n00000009done\n"))
	f.Add(uint8(0), false, []byte("0000"))
	f.Add(uint8(3), false, []byte("ffff"))
	f.Add(uint8(2), false, []byte(pkt("command=fetch")+"0002"))

	client := &http.Client{Timeout: 30 * time.Second}
	f.Fuzz(func(t *testing.T, version uint8, gz bool, body []byte) {
		if len(body) > 1<<20 {
			return
		}
		payload := body
		if gz {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(body)
			zw.Close()
			payload = b.Bytes()
		}
		req, err := http.NewRequest(http.MethodPost, url+"/git-upload-pack", bytes.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", uploadPackRequest)
		switch version % 4 {
		case 1:
			req.Header.Set("Git-Protocol", "version=1")
		case 2:
			req.Header.Set("Git-Protocol", "version=2")
		case 3:
			req.Header.Set("Git-Protocol", "version=0:version=2:x=y")
		}
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("no answer (a panic drops the connection): %v", err)
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("answer cut short: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("answered in %s", d)
		}
		if resp.StatusCode >= 500 {
			t.Errorf("%s for %q: %.200q", resp.Status, body, answer)
		}
		if resp.StatusCode == http.StatusBadRequest && len(answer) < 10 {
			t.Errorf("400 without saying why: %q", answer)
		}
	})
}
