package centre_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestHostileRequests: oversized bodies, malformed JSON, a receipt with a
// bad digest, wrong methods and paths: each refused with its status and
// one sentence, nothing written.
func TestHostileRequests(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{Uses: 2})
	m := w.join("m", tok, nil)
	cred := m.cl.Credential
	rv := w.member("m").ResourceVersion
	badReceipt := `{"member":"m","created":"2026-01-01T00:00:00Z","packages":[],"receipt":{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{"sha256:` + strings.Repeat("0", 63) + `":5}}}`
	var many strings.Builder
	many.WriteString(`{"member":"m","packages":[`)
	for i := range wire.MaxPackages + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `{"name":"p%d","ready":true}`, i)
	}
	many.WriteString("]}")
	receipt := `{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{}}`
	var manyRepos strings.Builder
	manyRepos.WriteString(`{"member":"m","packages":[],"repositories":{`)
	for i := range wire.MaxPackages + 1 {
		if i > 0 {
			manyRepos.WriteString(",")
		}
		fmt.Fprintf(&manyRepos, `"r%d":%s`, i, receipt)
	}
	manyRepos.WriteString("}}")

	for _, tc := range []struct {
		name, path, cred string
		body             []byte
		status           int
		says             string
	}{
		{"join too large", wire.PathJoin, "", bytes.Repeat([]byte("a"), wire.MaxJoinRequest+1), 413, "the join request is larger than the centre takes (65536 bytes)"},
		{"sync too large", wire.PathSync, cred, bytes.Repeat([]byte(" "), wire.MaxReport+1), 413, "the report is larger than the centre takes"},
		{"join not JSON", wire.PathJoin, "", []byte(`{"name":`), 400, "the join request is not JSON of its shape"},
		{"join empty", wire.PathJoin, "", nil, 400, "the join request is empty"},
		{"join without a key", wire.PathJoin, "", []byte(`{"name":"n","token":"` + tok + `"}`), 400, "no public key"},
		{"join with a bad key", wire.PathJoin, "", []byte(`{"name":"n","token":"` + tok + `","publicKey":"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}`), 400, "key"},
		{"sync not JSON", wire.PathSync, cred, []byte(`[1,2`), 400, "the report is not JSON of its shape"},
		{"sync wrong shape", wire.PathSync, cred, []byte(`{"member":5}`), 400, "the report is not JSON of its shape"},
		{"sync bad receipt", wire.PathSync, cred, []byte(badReceipt), 400, "the report carries a receipt that is not one: invalid digest"},
		{"sync bad package name", wire.PathSync, cred, []byte(`{"member":"m","packages":[{"name":"../x","ready":true}]}`), 400, `the report's package 0: name "../x"`},
		{"sync bad digest", wire.PathSync, cred, []byte(`{"member":"m","packages":[{"name":"x","digest":"md5:1","ready":true}]}`), 400, `"md5:1" is not a digest`},
		{"sync too many packages", wire.PathSync, cred, []byte(many.String()), 413, "more than 256"},
		{"sync bad repository", wire.PathSync, cred, []byte(`{"member":"m","packages":[],"repositories":{"../x":` + receipt + `}}`), 400, `a receipt of "../x", which is not a repository name`},
		{"sync bad repository receipt", wire.PathSync, cred, []byte(`{"member":"m","packages":[],"repositories":{"shop":{"mediaType":"x"}}}`), 400, "the report's repository shop carries a receipt that is not one"},
		{"sync null repository receipt", wire.PathSync, cred, []byte(`{"member":"m","packages":[],"repositories":{"shop":null}}`), 400, "the report's repository shop carries a receipt that is not one"},
		{"sync too many repositories", wire.PathSync, cred, []byte(manyRepos.String()), 413, "receipts of 257 repositories, more than 256"},
		{"sync bad credential", wire.PathSync, "m.nothex", []byte(`{}`), 401, "not a fleet member credential"},
		{"bundle not JSON", wire.PathBundle, cred, []byte(`{"digest":5}`), 400, "the bundle request is not JSON of its shape"},
		{"bundle bad receipt", wire.PathBundle, cred, []byte(`{"repository":"a","digest":"sha256:` + strings.Repeat("a", 64) + `","receipt":{"mediaType":"x"}}`), 400, "not a receipt"},
		{"unknown path", "/fleet/v1/nope", "", nil, 404, "no fleet endpoint at /fleet/v1/nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, msg := w.post(tc.path, tc.cred, tc.body)
			if status != tc.status || !strings.Contains(msg, tc.says) || strings.Contains(msg, "\n") {
				t.Errorf("%d %q, want %d saying %q in one line", status, msg, tc.status, tc.says)
			}
		})
	}
	if got := w.member("m").ResourceVersion; got != rv {
		t.Error("a refused request changed the member")
	}
	if got := w.usesLeft(tok); got != "1" {
		t.Errorf("refused joins took uses of the token: %s left", got)
	}

	t.Run("GET", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w.c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, wire.PathSync, nil))
		if rec.Code != 405 || rec.Header().Get("Allow") != "POST" || !strings.Contains(rec.Body.String(), `"error":"POST to /fleet/v1/sync"`) {
			t.Errorf("%d %s", rec.Code, rec.Body)
		}
	})
}

// FuzzHandler: whatever a member sends, the centre answers with a status
// it means, and never panics.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{`{}`, `{"member":"m","packages":[{"name":"a","ready":true}]}`, `{"token":"ff1.abcdef.` + strings.Repeat("a", 64) + `.` + strings.Repeat("b", 64) + `","name":"n","publicKey":"x"}`,
		`{"repository":"apps/a","digest":"sha256:` + strings.Repeat("c", 64) + `","receipt":{}}`, `null`, `[]`, "\x00",
		`{"member":"m","packages":[],"repositories":{"a":{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{}}}}`} {
		f.Add(0, s)
		f.Add(1, s)
		f.Add(2, s)
	}
	w := newWorld(f)
	cred := w.join("m", w.token(centre.TokenOptions{}), nil).cl.Credential
	h := w.c.Handler()
	f.Fuzz(func(t *testing.T, which int, body string) {
		path := []string{wire.PathJoin, wire.PathSync, wire.PathBundle}[(which%3+3)%3]
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cred)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 401, 403, 404, 409, 413, 429:
		default:
			t.Fatalf("%s %q: %d %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code != 200 && strings.Count(rec.Body.String(), "\n") != 1 {
			t.Fatalf("not one line: %q", rec.Body)
		}
	})
}
