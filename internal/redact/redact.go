// Package redact hides credentials in what ferry prints or logs: one
// redaction for every URL, applied where a URL is put into a message and
// again to every line the CLI prints, so that a token given as a URL's user
// name, password or query never reaches a terminal, a log or an error
// report, whoever formatted the message (go-git and net/http put the URL
// they were given into their errors).
package redact

import (
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
