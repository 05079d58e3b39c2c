// Package gitcred finds credentials for git repositories the way git users
// keep them: a netrc file ($NETRC, else ~/.netrc) and git's own credential
// helpers (`git credential fill`, then `approve` or `reject`), as Go's
// GOAUTH=git does. Credentials are never written into a URL or a package.
package gitcred

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/internal/childproc"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/redact"
)

// Credential is a user name and password (or token) for one URL.
type Credential struct {
	Username, Password string
}

// Netrc returns the credential a netrc file holds for host (host or
// host:port; a machine entry naming the host without a port matches
// too), or false. The file is $NETRC, else ~/.netrc; a missing file holds
// nothing. A malformed file is an error naming it.
func Netrc(host string) (Credential, bool, error) {
	file := os.Getenv("NETRC")
	if file == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return Credential{}, false, nil
		}
		file = filepath.Join(home, ".netrc")
	}
	data, err := confine.ReadPath(file, maxNetrcSize)
	if errors.Is(err, os.ErrNotExist) {
		return Credential{}, false, nil
	}
	if err != nil {
		return Credential{}, false, err
	}
	entries, err := parseNetrc(data)
	if err != nil {
		return Credential{}, false, fmt.Errorf("%s: %w", file, err)
	}
	bare, _, _ := strings.Cut(host, ":")
	var def *netrcEntry
	for i, e := range entries {
		switch e.machine {
		case host, bare:
			return Credential{Username: e.login, Password: e.password}, true, nil
		case "":
			def = &entries[i]
		}
	}
	if def != nil {
		return Credential{Username: def.login, Password: def.password}, true, nil
	}
	return Credential{}, false, nil
}

type netrcEntry struct{ machine, login, password string }

// parseNetrc reads netrc(5) tokens: machine, default, login, password,
// account (ignored) and macdef (skipped to the next empty line).
func parseNetrc(data []byte) ([]netrcEntry, error) {
	var out []netrcEntry
	var cur *netrcEntry
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		fields := strings.Fields(lines[i])
		for j := 0; j < len(fields); j++ {
			tok := fields[j]
			if strings.HasPrefix(tok, "#") {
				break
			}
			arg := func() (string, error) {
				if j+1 >= len(fields) {
					return "", fmt.Errorf("line %d: %q without a value", i+1, tok)
				}
				j++
				return fields[j], nil
			}
			switch tok {
			case "machine":
				m, err := arg()
				if err != nil {
					return nil, err
				}
				out = append(out, netrcEntry{machine: m})
				cur = &out[len(out)-1]
			case "default":
				out = append(out, netrcEntry{})
				cur = &out[len(out)-1]
			case "login", "password", "account":
				v, err := arg()
				if err != nil {
					return nil, err
				}
				if cur == nil {
					return nil, fmt.Errorf("line %d: %q before any machine", i+1, tok)
				}
				switch tok {
				case "login":
					cur.login = v
				case "password":
					cur.password = v
				}
			case "macdef":
				for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" {
					i++
				}
				j = len(fields)
			default:
				return nil, fmt.Errorf("line %d: unknown token %q", i+1, tok)
			}
		}
	}
	return out, nil
}

// Helper asks git's credential helpers, through the git binary.
type Helper struct {
	// Git is the git binary; "git" on PATH when empty.
	Git string
}

// Available says whether the git binary is there to ask.
func (h Helper) Available() bool {
	_, err := exec.LookPath(h.git())
	return err == nil
}

func (h Helper) git() string {
	if h.Git != "" {
		return h.Git
	}
	return "git"
}

// Fill asks git's credential helpers for u's credential, never prompting
// on a terminal (GIT_TERMINAL_PROMPT=0): false when none has one.
func (h Helper) Fill(ctx context.Context, u *url.URL) (Credential, bool, error) {
	out, err := h.run(ctx, "fill", u, Credential{})
	if err != nil {
		// git credential fill fails when nothing can answer without a prompt.
		return Credential{}, false, nil
	}
	var c Credential
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "username":
			c.Username = v
		case "password":
			c.Password = v
		}
	}
	return c, c.Password != "" || c.Username != "", nil
}

// Approve tells the helpers that c worked for u (they may store it);
// Reject that it did not (they drop it).
func (h Helper) Approve(ctx context.Context, u *url.URL, c Credential) error {
	_, err := h.run(ctx, "approve", u, c)
	return err
}

// Reject: see Approve.
func (h Helper) Reject(ctx context.Context, u *url.URL, c Credential) error {
	_, err := h.run(ctx, "reject", u, c)
	return err
}

func (h Helper) run(ctx context.Context, op string, u *url.URL, c Credential) ([]byte, error) {
	var in strings.Builder
	fmt.Fprintf(&in, "protocol=%s\nhost=%s\npath=%s\n", u.Scheme, u.Host, strings.TrimPrefix(u.Path, "/"))
	switch {
	case c.Username != "":
		fmt.Fprintf(&in, "username=%s\n", c.Username)
	case u.User != nil:
		fmt.Fprintf(&in, "username=%s\n", u.User.Username())
	}
	if c.Password != "" {
		fmt.Fprintf(&in, "password=%s\n", c.Password)
	}
	in.WriteString("\n")
	// A helper that waits for a person (a GUI prompt) or never answers
	// is given up on; it dies with ferry (childproc).
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	cmd := childproc.Command(ctx, h.git(), "credential", op)
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GCM_INTERACTIVE=never")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &limitedBuffer{buf: &stdout, left: maxHelperOutput}
	cmd.Stderr = &limitedBuffer{buf: &stderr, left: maxHelperOutput}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git credential %s for %s://%s: %w: %s", op, u.Scheme, u.Host, err, redact.Text(strings.Join(strings.Fields(stderr.String()), " ")))
	}
	return stdout.Bytes(), nil
}

// helperTimeout bounds one run of git's credential helpers (30 s).
const helperTimeout = 30 * time.Second

// maxHelperOutput bounds what is kept of a helper's output (64 KiB: a
// credential is a few lines).
const maxHelperOutput = 64 << 10

// limitedBuffer keeps the first left bytes written to it.
type limitedBuffer struct {
	buf  *bytes.Buffer
	left int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if n := min(len(p), l.left); n > 0 {
		l.buf.Write(p[:n])
		l.left -= n
	}
	return len(p), nil
}

// maxNetrcSize bounds a .netrc file.
const maxNetrcSize = 1 << 20
