package gitrepo

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/ferrypkg/ferry/internal/redact"
)

// CleanURL is u without user information; a URL that carries a password
// is refused (credentials belong to the git credential helpers or a netrc,
// never to a package), and so is one with a query or a fragment, which name
// no repository (a token there would end up in the package).
func CleanURL(u string) (string, error) {
	if u == "" {
		return "", errors.New("git source: no url")
	}
	if strings.ContainsAny(u, "?#") {
		return "", fmt.Errorf("git source url %s: a query or fragment is not part of a repository's address; credentials go in a git credential helper or ~/.netrc", redact.URL(u))
	}
	if strings.ContainsFunc(u, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", fmt.Errorf("git source url %q: control characters", redact.URL(u))
	}
	if !strings.Contains(u, "://") {
		// scp-like git@host:path, or a path. What redaction would mask
		// here is a password (user:password@host:path): a query was
		// refused above.
		if redact.URL(u) != u {
			return "", fmt.Errorf("%w: %s: use a git credential helper or ~/.netrc", ErrCredential, redact.URL(u))
		}
		return u, nil
	}
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("git source url %s: %w", redact.URL(u), errors.Unwrap(err))
	}
	if p.User != nil {
		if _, ok := p.User.Password(); ok {
			return "", fmt.Errorf("%w: %s: use a git credential helper or ~/.netrc", ErrCredential, redact.URL(u))
		}
		p.User = nil
	}
	return p.String(), nil
}

// Key is the identity of a repository URL, the same however it is
// spelled: host (lower case, without user information or the scheme's
// default port) and path, without a trailing ".git" or "/". So
// https://github.com/org/fleet.git, ssh://git@github.com:22/org/fleet and
// git@github.com:org/fleet.git are all "github.com/org/fleet". A local
// path (no host) is its cleaned path.
func Key(u string) string {
	host, p := splitURL(u)
	p = strings.TrimSuffix(strings.TrimSuffix(path.Clean("/"+p), "/"), ".git")
	if host == "" {
		return strings.TrimPrefix(p, "/")
	}
	return host + p
}

// RepositoryPath is where a repository's artifact goes in a registry: the
// URL's path without the host and ".git" (github.com/org/fleet → org/fleet),
// in lower case as registries require, like an image's path without its
// registry.
func RepositoryPath(u string) string {
	_, p := splitURL(u)
	p = strings.TrimSuffix(strings.Trim(path.Clean("/"+p), "/"), ".git")
	return strings.ToLower(p)
}

// splitURL splits a git URL into its host (lower case, no user, no
// default port) and path.
func splitURL(u string) (host, p string) {
	if !strings.Contains(u, "://") {
		// scp-like [user@]host:path, unless it is a local path.
		if i := strings.Index(u, ":"); i > 0 && !strings.Contains(u[:i], "/") {
			host = u[:i]
			if at := strings.LastIndex(host, "@"); at >= 0 {
				host = host[at+1:]
			}
			return strings.ToLower(host), u[i+1:]
		}
		return "", u
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", u
	}
	host = strings.ToLower(pu.Hostname())
	switch port := pu.Port(); {
	case port == "", pu.Scheme == "https" && port == "443", pu.Scheme == "http" && port == "80",
		pu.Scheme == "ssh" && port == "22", pu.Scheme == "git" && port == "9418":
	default:
		host += ":" + port
	}
	return host, pu.Path
}
