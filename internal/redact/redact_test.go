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
