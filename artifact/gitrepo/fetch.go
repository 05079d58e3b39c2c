package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v6/plumbing/transport"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/gitcred"
	"github.com/ferrypkg/ferry/internal/redact"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// Fetcher is artifact.GitFetcher with go-git: a local clone is read as it
// is; a URL is cloned, over HTTP(S) with the credentials git users keep
// (a netrc file, then git's credential helpers when the server asks), over
// SSH with the SSH agent and known_hosts as git does.
type Fetcher struct {
	// Credentials are git's credential helpers; the zero value runs the
	// git on PATH, and none when there is no git.
	Credentials gitcred.Helper
}

var _ build.GitFetcher = Fetcher{}

// FetchGit resolves src to a commit and pushes its artifact to dst. A
// local src.Path is read inside dir only (OpenLocal).
func (f Fetcher) FetchGit(ctx context.Context, src definition.Repository, dir *os.Root, dst content.Pusher) (artifact.Repository, ocispec.Descriptor, error) {
	s := Source{URL: src.URL, Path: src.Path, Root: dir, Ref: src.Ref}
	var r *git.Repository
	var err error
	if s.Path == "" {
		// Cloned to disk, not memory, and removed once built (or by the
		// next run's sweep, if this one is killed).
		tmp, err := scratch.MkdirTemp("", "ferry-clone-")
		if err != nil {
			return artifact.Repository{}, ocispec.Descriptor{}, err
		}
		defer tmp.Remove()
		s.CloneDir = tmp.Path
	}
	if s.Path != "" {
		r, err = Open(ctx, s, nil)
	} else {
		r, err = f.clone(ctx, s)
	}
	if err != nil {
		return artifact.Repository{}, ocispec.Descriptor{}, err
	}
	res, err := Resolve(r, s)
	if err != nil {
		return artifact.Repository{}, ocispec.Descriptor{}, err
	}
	desc, err := Build(ctx, r, res, src.History, dst)
	if err != nil {
		return artifact.Repository{}, ocispec.Descriptor{}, err
	}
	return artifact.Repository{
		URL: res.URL, Key: Key(res.URL), Path: RepositoryPath(res.URL),
		Ref: res.Ref, Commit: res.Commit, Revision: res.Revision, History: src.History,
	}, desc, nil
}

// clone clones s.URL: anonymously or with the netrc's credential first;
// when an HTTP server asks for one, with what git's credential helpers
// give, which they are then told worked or not.
func (f Fetcher) clone(ctx context.Context, s Source) (*git.Repository, error) {
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return Open(ctx, s, nil) // ssh: go-git's SSH agent and known_hosts
	}
	var cred *Credentials
	c, ok, err := gitcred.Netrc(u.Host)
	if err != nil {
		return nil, err
	}
	if ok {
		cred = &Credentials{Username: c.Username, Password: c.Password}
	}
	r, err := Open(ctx, s, cred)
	if !needsCredential(err) {
		return r, err
	}
	if !f.Credentials.Available() {
		return nil, fmt.Errorf("clone %s: %w: put them in ~/.netrc (or $NETRC), or install git and configure a credential helper", redact.URL(s.URL), transport.ErrAuthenticationRequired)
	}
	c, ok, ferr := f.Credentials.Fill(ctx, u)
	if ferr != nil {
		return nil, ferr
	}
	if !ok {
		return nil, fmt.Errorf("clone %s: %w: no git credential helper has credentials for %s://%s (see `git help credential`), and ~/.netrc has none", redact.URL(s.URL), transport.ErrAuthenticationRequired, u.Scheme, u.Host)
	}
	r, err = Open(ctx, s, &Credentials{Username: c.Username, Password: c.Password})
	switch {
	case err == nil:
		_ = f.Credentials.Approve(ctx, u, c)
	case needsCredential(err):
		_ = f.Credentials.Reject(ctx, u, c)
		return nil, fmt.Errorf("clone %s: %w: the credentials git's credential helper gave for %s were refused", redact.URL(s.URL), transport.ErrAuthorizationFailed, u.Host)
	}
	return r, err
}

func needsCredential(err error) bool {
	return err != nil && (errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) ||
		strings.Contains(err.Error(), "authentication required"))
}
