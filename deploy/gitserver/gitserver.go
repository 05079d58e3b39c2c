// Package gitserver serves the git repositories packages carry, read-only,
// over git's smart HTTP protocol (v0, v1 and v2, shallow clones included),
// so that tools which speak only git (Flux's GitRepository, Argo CD) clone
// them inside the air gap.
//
// A repository is served at http://<host>/<key>.git, where key is
// gitrepo.Key of its URL ("github.com/org/fleet"). Its history arrives as
// the git bundle a package carries (artifact/gitrepo); the server indexes
// it once, on disk, into a bare repository of its own (per commit and
// bundle digest) that holds only the carried ref and HEAD, and answers
// upload-pack from it with go-git v6's pure-Go upload-pack. Pushes are
// refused.
//
// Memory stays bounded whatever a bundle holds: the pack is indexed here
// (packindex.go), objects are read lazily (readonly.go), and stored deltas
// are sent as they are. Requests are checked against git's grammar before
// go-git sees them (request.go): a client's mistake is a 4xx, never a 500.
package gitserver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v6/plumbing/transport"
	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/internal/authlimit"
)

// Paths and defaults.
const (
	// PathHealth answers 200 to probes, without authentication.
	PathHealth = "/healthz"
	// DefaultRealm is the Basic authentication realm.
	DefaultRealm = "ferry git"
	// DefaultMaxRequestBytes bounds an upload-pack request body, after
	// gzip is undone: a clone's wants and haves are a few kilobytes.
	DefaultMaxRequestBytes = 8 << 20
	// DefaultTimeout bounds one request, the pack it sends included.
	DefaultTimeout = 10 * time.Minute
	// DefaultMaxPacks bounds the upload-pack requests answered at once;
	// others wait (up to their timeout). Each holds its request (up to
	// the max request bytes) and at most a few objects of up to 32 MiB.
	DefaultMaxPacks = 4
)

// Errors, wrapped with the repository or request they concern.
var (
	// ErrNotFound: no carried repository has that key (HTTP 404).
	ErrNotFound = errors.New("git repository not found")
	// ErrBundle: a bundle is malformed, or does not hold what its package
	// recorded; it is never served.
	ErrBundle = errors.New("git bundle")
	// ErrUnauthorized: wrong or missing credentials (HTTP 401).
	ErrUnauthorized = errors.New("unauthorized")
)

// Repo is one carried repository, as a Lookup finds it.
type Repo struct {
	// Key is gitrepo.Key of URL: the path it is served at.
	Key string
	// URL is the repository's original URL (for messages).
	URL string
	// Ref is the carried ref (refs/heads/main, refs/tags/v1), served with
	// HEAD pointing at it; empty for a bare commit, served as a detached
	// HEAD.
	Ref string
	// Commit is the recorded commit's 40-hex id: the bundle's ref (peeled)
	// must name it.
	Commit string
	// BundleDigest is the bundle's digest: with Commit it keys the index,
	// and the bytes Bundle returns are checked against it.
	BundleDigest digest.Digest
	// Bundle opens the bundle (git bundle v2 with no prerequisites, as
	// gitrepo.Bundle writes it).
	Bundle func(ctx context.Context) (io.ReadCloser, error)
}

// Lookup finds the repository served at key; an error wrapping ErrNotFound
// when none is.
type Lookup func(ctx context.Context, key string) (*Repo, error)

// Authenticator checks Basic credentials: nil accepts them, an error
// wrapping ErrUnauthorized refuses them (401), any other error means they
// cannot be checked now (503 with Retry-After).
type Authenticator func(ctx context.Context, username, password string) error

// Server is an http.Handler serving carried repositories read-only.
type Server struct {
	lookup  Lookup
	opts    options
	index   *index
	packs   chan struct{} // a slot per upload-pack answered
	handler http.Handler
}

type options struct {
	auth            Authenticator
	authLimit       authlimit.Options
	realm           string
	cacheDir        string
	maxRequestBytes int64
	maxPacks        int
	timeout         time.Duration
	logger          *slog.Logger
}

// Option configures a Server.
type Option func(*options) error

// WithAuth requires HTTP Basic credentials that auth accepts on every path
// but PathHealth. Without it, anyone who reaches the server may clone.
// Password guessing is slowed down: a client (IP address) whose
// credentials are refused again and again gets 429 with Retry-After, the
// right password included, for longer and longer (WithAuthLimit).
func WithAuth(auth Authenticator) Option {
	return func(o *options) error {
		if auth == nil {
			return errors.New("gitserver: nil Authenticator")
		}
		o.auth = auth
		return nil
	}
}

// WithAuthLimit sets how clients whose credentials are refused again and
// again are slowed down (429 with Retry-After; see internal/authlimit for
// the defaults the zero value takes). It applies with WithAuth.
func WithAuthLimit(o authlimit.Options) Option {
	return func(opts *options) error {
		opts.authLimit = o
		return nil
	}
}

// WithMaxPacks bounds the upload-pack requests answered at once (default
// DefaultMaxPacks).
func WithMaxPacks(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("gitserver: max packs %d: want > 0", n)
		}
		o.maxPacks = n
		return nil
	}
}

// WithRealm sets the Basic realm announced on 401 (default DefaultRealm).
func WithRealm(realm string) Option {
	return func(o *options) error {
		if realm == "" || strings.ContainsAny(realm, "\"\r\n") {
			return fmt.Errorf("gitserver: realm %q: empty or with quotes or newlines", realm)
		}
		o.realm = realm
		return nil
	}
}

// WithCacheDir keeps the indexed repositories as bare repositories under
// dir (created if missing), where a restarted server finds them again;
// what a killed server left half-made there is removed. Without it they
// are kept in a temporary directory of the server's own, removed by
// Close (or, if the process was killed, by the next ferry process that
// makes a temporary folder).
func WithCacheDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("gitserver: empty cache directory")
		}
		o.cacheDir = dir
		return nil
	}
}

// WithMaxRequestBytes bounds a request body, decompressed (default
// DefaultMaxRequestBytes); larger requests get 413.
func WithMaxRequestBytes(n int64) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("gitserver: max request bytes %d: want > 0", n)
		}
		o.maxRequestBytes = n
		return nil
	}
}

// WithTimeout bounds each request, indexing and the pack sent included
// (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("gitserver: timeout %s: want > 0", d)
		}
		o.timeout = d
		return nil
	}
}

// WithLogger logs refusals and failures to l (default: discarded).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("gitserver: nil logger")
		}
		o.logger = l
		return nil
	}
}

// New returns a Server answering for the repositories lookup finds.
func New(lookup Lookup, opts ...Option) (*Server, error) {
	if lookup == nil {
		return nil, errors.New("gitserver: nil Lookup")
	}
	o := options{
		realm: DefaultRealm, maxRequestBytes: DefaultMaxRequestBytes, maxPacks: DefaultMaxPacks,
		timeout: DefaultTimeout, logger: slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	ix, err := newIndex(o.cacheDir)
	if err != nil {
		return nil, err
	}
	s := &Server{lookup: lookup, opts: o, index: ix, packs: make(chan struct{}, o.maxPacks)}
	s.handler = http.HandlerFunc(s.serve)
	if o.auth != nil {
		// Password guessing: refused credentials slow their client down.
		s.handler = authlimit.New(o.authLimit).Handler(s.handler)
	}
	return s, nil
}

// Close stops the indexing in progress and closes the indexed
// repositories; without a cache directory, it removes the server's
// temporary one. Call it once the HTTP server is shut down: requests still
// in flight fail.
func (s *Server) Close() error {
	return s.index.close()
}

// Git's smart HTTP endpoints, after /<key>.git.
const (
	suffixInfoRefs    = "/info/refs"
	suffixUploadPack  = "/" + transport.UploadPackService
	suffixReceivePack = "/" + transport.ReceivePackService
)

// ServeHTTP answers PathHealth, GET <repo>/info/refs?service=git-upload-pack
// and POST <repo>/git-upload-pack; receive-pack gets 403 and anything else
// 404. A request git's upload-pack grammar does not allow gets 400 (415
// for another content type), with what is wrong; with WithAuth, a client
// whose credentials were refused too often gets 429 until its back-off
// ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == PathHealth {
		// Before the password guessing limiter: a probe checks no
		// credentials, so its 200 is no successful sign-in that would
		// clear a guesser's failures.
		health(w, r)
		return
	}
	s.handler.ServeHTTP(w, r)
}

// health answers a probe of PathHealth.
func health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		httpError(w, http.StatusMethodNotAllowed, "GET only")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !s.authenticate(w, r) {
		return
	}
	key, suffix, ok := route(r.URL.Path)
	if !ok {
		httpError(w, http.StatusNotFound, "not found: repositories are served at /<host>/<path>.git")
		return
	}
	service := transport.UploadPackService
	switch suffix {
	case suffixInfoRefs:
		if r.Method != http.MethodGet {
			httpError(w, http.StatusMethodNotAllowed, "GET only")
			return
		}
		service = r.URL.Query().Get("service")
	case suffixReceivePack:
		service = transport.ReceivePackService
	case suffixUploadPack:
		if r.Method != http.MethodPost {
			httpError(w, http.StatusMethodNotAllowed, "POST only")
			return
		}
	}
	switch service {
	case transport.UploadPackService:
	case transport.ReceivePackService:
		s.opts.logger.Info("push refused", "repository", key, "remote", r.RemoteAddr)
		httpError(w, http.StatusForbidden, "read-only: carried repositories cannot be pushed to; change them at their source and deploy a new package")
		return
	default: // the dumb protocol (no service), upload-archive, …
		httpError(w, http.StatusNotFound, "only git's smart HTTP upload-pack is served")
		return
	}

	version := protocolVersion(r.Header.Get("Git-Protocol"))
	if r.Method == http.MethodPost {
		// git http-backend's answer to another content type.
		if ct := r.Header.Get("Content-Type"); !strings.EqualFold(strings.TrimSpace(ct), mediaTypeRequest) {
			httpError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("expected POST with Content-Type %q, but received %.64q instead", mediaTypeRequest, ct))
			return
		}
	}

	ctx, cancel := context.WithTimeout(r.Context(), s.opts.timeout)
	defer cancel()
	repo, err := s.lookup(ctx, key)
	if err == nil && repo == nil {
		err = fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			httpError(w, http.StatusNotFound, "repository not found: "+key)
			return
		}
		s.opts.logger.Error("lookup failed", "repository", key, "error", err)
		httpError(w, http.StatusBadGateway, "repository "+key+": lookup failed")
		return
	}
	st, err := s.index.get(ctx, repo)
	if err != nil {
		if ctx.Err() != nil {
			httpError(w, http.StatusServiceUnavailable, "repository "+key+": still being indexed; try again")
			return
		}
		s.opts.logger.Error("index failed", "repository", key, "commit", repo.Commit, "error", err)
		httpError(w, http.StatusBadGateway, "repository "+key+": cannot be served")
		return
	}
	if r.Method == http.MethodGet {
		s.advertise(ctx, w, st, key, version)
		return
	}
	s.uploadPack(ctx, w, r, st, key, version)
}

// route splits a request path into the repository key and the endpoint
// (one of the suffix constants, or another path under the repository). A
// path that is not clean, or names no repository, is refused.
func route(p string) (key, suffix string, ok bool) {
	if p == "" || p[0] != '/' || path.Clean(p) != p {
		return "", "", false
	}
	for _, s := range []string{suffixInfoRefs, suffixUploadPack, suffixReceivePack} {
		if repo, found := strings.CutSuffix(p, s); found {
			key = strings.TrimSuffix(strings.TrimPrefix(repo, "/"), ".git")
			// host/path: at least two elements.
			if !strings.Contains(key, "/") {
				return "", "", false
			}
			return key, s, true
		}
	}
	return "", "", false
}

// authenticate answers 401 (503 if the Authenticator fails) and returns
// false unless the request carries credentials the Authenticator accepts.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.auth == nil {
		return true
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		s.challenge(w, "authentication required")
		return false
	}
	err := s.opts.auth(r.Context(), user, pass)
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrUnauthorized):
		s.opts.logger.Info("authentication refused", "user", user, "remote", r.RemoteAddr)
		s.challenge(w, "wrong user name or password")
	default:
		// The server cannot check credentials (its htpasswd file is
		// missing or broken): nothing the client did, and nothing it can
		// learn from; it may try again later.
		s.opts.logger.Error("authentication unavailable", "user", user, "error", err)
		w.Header().Set("Retry-After", "10")
		httpError(w, http.StatusServiceUnavailable, "authentication unavailable; try again later")
	}
	return false
}

func (s *Server) challenge(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="`+s.opts.realm+`", charset="UTF-8"`)
	httpError(w, http.StatusUnauthorized, msg)
}

// limitBody undoes a gzip Content-Encoding here (the backend would, but
// without a bound) and bounds what is read, compressed and not.
func (s *Server) limitBody(w http.ResponseWriter, r *http.Request) (io.ReadCloser, error) {
	raw := http.MaxBytesReader(w, r.Body, s.opts.maxRequestBytes)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
		return raw, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(raw)
		if err != nil {
			raw.Close()
			return nil, fmt.Errorf("request body: gzip: %w", err)
		}
		return &limitedGzip{zr: zr, raw: raw, left: s.opts.maxRequestBytes}, nil
	default:
		raw.Close()
		return nil, fmt.Errorf("request body: unsupported Content-Encoding %.64q", enc)
	}
}

var (
	errTooLarge   = errors.New("larger than the server accepts once decompressed")
	errBadPktLine = errors.New("gitserver: malformed pkt-line from upload-pack")
)

type limitedGzip struct {
	zr   *gzip.Reader
	raw  io.Closer
	left int64
}

func (l *limitedGzip) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.zr.Read(p)
	l.left -= int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*http.MaxBytesError](err); !ok {
			err = fmt.Errorf("gzip: %w", err)
		}
	}
	return n, err
}

func (l *limitedGzip) Close() error {
	err := l.zr.Close()
	if cerr := l.raw.Close(); err == nil {
		err = cerr
	}
	return err
}

func httpError(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}
