package redact

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://ghp_secret@github.com/o/r.git", "https://xxxxx@github.com/o/r.git"},
		{"https://u:p4ss@host/x", "https://xxxxx:xxxxx@host/x"},
		{"https://host/x?tok=1&a=b", "https://host/x?a=xxxxx&tok=xxxxx"},
		{"git@github.com:o/r.git", "git@github.com:o/r.git"},
		{"host:o/c.git?tok=1", "host:o/c.git?xxxxx"},
		{"https://host/x", "https://host/x"},
		// scp-like with a password, one holding "@" or "/", and a query
		{"user:hunter2@host:o/c.git", "xxxxx:xxxxx@host:o/c.git"},
		{"me:p@ss@git.example.com:o/c.git", "xxxxx:xxxxx@git.example.com:o/c.git"},
		{"me:hunter2@host:o/c.git?x=1", "xxxxx:xxxxx@host:o/c.git?xxxxx"},
		{"me:pa/ss@host:o/c.git", "xxxxx:xxxxx@host:o/c.git"},
		{"git@host:o/c.git@v1", "git@host:o/c.git@v1"},
		{"host:o/c.git", "host:o/c.git"},
		{"./local/repo", "./local/repo"},
		// a password holding "@" or "/" (url.Parse fails on the second)
		{"https://u:p@ss@host/x", "https://xxxxx:xxxxx@host/x"},
		{"https://u:pa/ss@host/x", "https://xxxxx@host/x"},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestText(t *testing.T) {
	in := `clone https://ghp_abc123@github.com/o/r.git: Get "https://user:hunter2@h/x/info/refs?service=git-upload-pack&access_token=s3cr3t": dial tcp`
	got := Text(in)
	for _, secret := range []string{"ghp_abc123", "hunter2", "s3cr3t", "user:"} {
		if strings.Contains(got, secret) {
			t.Errorf("Text left %q in %q", secret, got)
		}
	}
	if !strings.Contains(got, "service=git-upload-pack") || !strings.Contains(got, "github.com/o/r.git") {
		t.Errorf("Text hid more than the secrets: %q", got)
	}
}

// TestTextForms: every form a URL with credentials takes in free text is
// masked, and what only looks like one (an image reference by digest) is
// left alone.
func TestTextForms(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`"user:hunter2@host:o/c.git" is not a git URL`, `"xxxxx:xxxxx@host:o/c.git" is not a git URL`},
		{"clone me:p@ss@host:o/c.git: refused", "clone xxxxx:xxxxx@host:o/c.git: refused"},
		{"clone me:pa/ss@host:o/c.git: refused", "clone xxxxx:xxxxx@host:o/c.git: refused"},
		{"push localhost:5000/o/img:v1@sha256:0123abcd", "push localhost:5000/o/img:v1@sha256:0123abcd"},
		{"proxy user:hunter2@proxy.example:3128 down", "proxy xxxxx:xxxxx@proxy.example:3128 down"},
		{"Get https://u:p@ss@host/x: EOF", "Get https://xxxxx@host/x: EOF"},
		{"clone git@github.com:o/r.git failed", "clone git@github.com:o/r.git failed"},
		{"clone http://tok@127.0.0.1:1/o/r.git: refused", "clone http://xxxxx@127.0.0.1:1/o/r.git: refused"},
		{"clone ssh://git@host:22/o/r.git: refused", "clone ssh://xxxxx@host:22/o/r.git: refused"},
		{"image nginx:1.25@sha256:0123abcd not found", "image nginx:1.25@sha256:0123abcd not found"},
		{"image ghcr.io/o/img:v1@sha256:0123abcd", "image ghcr.io/o/img:v1@sha256:0123abcd"},
		{"at 10:30 the server said no", "at 10:30 the server said no"},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestHandler(t *testing.T) {
	var buf strings.Builder
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil))).With("origin", "https://u:p4ss@h/x")
	log.Info("clone https://ghp_tok@github.com/o/r.git failed", "url", "https://a:s3cr3t@h/y", "err", errors.New("Get \"https://b:hunter2@h/z\": EOF"))
	for _, secret := range []string{"p4ss", "ghp_tok", "s3cr3t", "hunter2"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the log shows %q: %s", secret, buf.String())
		}
	}
}
