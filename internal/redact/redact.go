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
// Anything that is not a URL with a scheme is returned as it is, except
// that a query on an scp-like git address (host:path?…) is masked too.
func URL(u string) string {
	if !strings.Contains(u, "://") {
		if i := strings.IndexAny(u, "?#"); i >= 0 {
			return u[:i+1] + Mask
		}
		return u
	}
	p, err := url.Parse(u)
	if err != nil {
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

// userinfo matches the user information of a URL in free text:
// scheme://user[:password]@.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#\s@]+)@`)

// secretQuery matches query parameters whose names say they are secrets,
// in free text.
var secretQuery = regexp.MustCompile(`(?i)([?&](?:[a-z0-9_.-]*(?:token|secret|password|passwd|pwd|key|sig|signature|credential|auth)[a-z0-9_.-]*)=)[^&\s"']+`)

// Text returns s with the user information of every URL in it, and the
// values of query parameters that look like secrets (token, password,
// signature, key…), replaced by Mask.
func Text(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
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
