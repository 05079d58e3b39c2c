// Package redact hides credentials in what ferry prints or logs: one
// redaction for every URL, applied where a URL is put into a message and
// again to every line the CLI prints, so that a token given as a URL's user
// name, password or query never reaches a terminal, a log or an error
// report, whoever formatted the message (go-git and net/http put the URL
// they were given into their errors).
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces what is hidden.
const Mask = "xxxxx"

// URL returns u with its user information (user name and password: a token
// is often given as the user name) and its query values replaced by Mask.
// An scp-like git address ([user@]host:path) keeps its user name, an SSH
// login, but not a password (user:password@host:path) nor a query. A URL
// that does not parse loses everything between its scheme and its last
// "@". Anything else is returned as it is.
func URL(u string) string {
	if !strings.Contains(u, "://") {
		return scpURL(u)
	}
	p, err := url.Parse(u)
	if err != nil {
		// url.Parse takes the authority to end at the first "/", so a
		// password holding one fails to parse; the last "@" ends it.
		i := strings.Index(u, "://") + len("://")
		if at := strings.LastIndex(u, "@"); at > i {
			u = u[:i] + Mask + u[at:]
		}
		return Text(u)
	}
	if p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(Mask, Mask)
		} else {
			p.User = url.User(Mask)
		}
	}
	if p.RawQuery != "" {
		q := p.Query()
		for k := range q {
			q[k] = []string{Mask}
		}
		p.RawQuery = q.Encode()
	}
	if p.Fragment != "" {
		p.Fragment = Mask
	}
	return p.String()
}

// scpURL is URL for an address without a scheme: a query or fragment
// becomes Mask, and user:password@ Mask:Mask@. The user information ends at
// the last "@" followed by host: (a password may hold "@" or "/").
func scpURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i+1] + Mask
	}
	for at := strings.LastIndex(u, "@"); at > 0; at = strings.LastIndex(u[:at], "@") {
		host, _, ok := strings.Cut(u[at+1:], ":")
		if ok && !strings.ContainsAny(host, "/@") {
			if strings.Contains(u[:at], ":") {
				return Mask + ":" + Mask + u[at:]
			}
			break
		}
	}
	return u
}

// userinfo matches the user information of a URL in free text:
// scheme://user[:password]@, up to the last "@" before the host's end
// (a password may hold an "@").
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#\s]+)@`)

// scpUserinfo matches an scp-like address with a password in free text,
// user:password@host:, starting a word; the password runs to the last
// "@" followed by host: in the word, and does not start with "/" (that is
// scheme://user@host:port, userinfo's).
var scpUserinfo = regexp.MustCompile(`(^|[\s"'(\[<>=,;])[^\s"'/@:]+:[^\s"'/][^\s"']*@([^\s"'/@:]+):`)

// digestAlgorithm matches what follows "@" in an image reference
// (name:tag@sha256:…), which scpUserinfo would otherwise take for a host.
var digestAlgorithm = regexp.MustCompile(`^(sha256|sha384|sha512|blake3)$`)

// secretQuery matches query parameters whose names say they are secrets,
// in free text.
var secretQuery = regexp.MustCompile(`(?i)([?&](?:[a-z0-9_.-]*(?:token|secret|password|passwd|pwd|key|sig|signature|credential|auth)[a-z0-9_.-]*)=)[^&\s"']+`)

// Text returns s with the user information of every URL in it, the
// password of every scp-like address (user:password@host:path), and the
// values of query parameters that look like secrets (token, password,
// signature, key…), replaced by Mask.
func Text(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	s = scpUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := scpUserinfo.FindStringSubmatch(m)
		if digestAlgorithm.MatchString(sub[2]) {
			return m
		}
		return sub[1] + Mask + ":" + Mask + "@" + sub[2] + ":"
	})
	return secretQuery.ReplaceAllString(s, "${1}"+Mask)
}

// Error returns err with its message passed through Text; it unwraps to
// err, so errors.Is and errors.As see through it.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return redacted{err}
}

type redacted struct{ err error }

func (r redacted) Error() string { return Text(r.err.Error()) }
func (r redacted) Unwrap() error { return r.err }

// Handler returns h with every record's message and string, error and
// Stringer attributes passed through Text: a server's log carries no
// credential, whoever wrote the line.
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = attr(a)
	}
	return handler{h.next.WithAttrs(red)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = attr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, Text(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, Text(x.String()))
		}
	}
	return a
}
