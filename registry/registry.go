// Package registry is ferry's embedded OCI registry: distribution v3 run
// in-process, behind one constructor, with the OCI 1.1 referrers API that
// distribution v3.1.2 lacks added around it.
//
// Embedding distribution has traps, contained here and nowhere else:
// handlers.NewApp panics on a bad configuration (New validates first and turns
// any remaining panic into an error), distribution logs through the global
// logrus logger (New silences it and forwards entries to the Server's
// *slog.Logger), and its cmd packages register cobra commands in init() (this
// package never imports them).
package registry

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/auth"

	// Storage drivers and the htpasswd access controller register
	// themselves by name in init().
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/s3-aws"

	"github.com/ferrypkg/ferry/internal/authlimit"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/confine"
)

// DefaultAddr is the address ListenAndServe uses when Config.Addr is empty.
const DefaultAddr = "127.0.0.1:5000"

// DefaultRealm is the basic-auth realm announced when Config.Realm is empty.
const DefaultRealm = "ferry"

// Config describes one registry. The zero value is a valid in-memory registry
// without authentication or TLS, with deletes enabled.
type Config struct {
	// RootDir is the filesystem storage root. Empty (and no S3) means
	// in-memory storage, lost when the process ends.
	RootDir string
	// S3, when set, puts the storage on an S3-compatible object store
	// instead; RootDir must then be empty. Several registries may share it.
	S3 *S3
	// HTTPSecret signs upload state. Registries that share a storage behind
	// one address need the same one; empty means random for filesystem
	// storage and, for S3, the one kept on the storage (made by the first
	// registry).
	HTTPSecret string
	// MaintenancePoll is how often the registry looks for the read-only
	// maintenance flag on its storage (SetReadOnly, GarbageCollect);
	// DefaultMaintenancePoll if zero.
	MaintenancePoll time.Duration
	// Addr is the address ListenAndServe listens on; DefaultAddr if empty.
	Addr string
	// DisableDelete turns off DELETE of manifests, tags and blobs (enabled by
	// default).
	DisableDelete bool
	// HTPasswdFile, when set, requires HTTP basic authentication checked
	// against this htpasswd file (bcrypt entries). The file must exist.
	// Password guessing is slowed down: a client (remote IP address; for
	// IPv6, its /64) whose credentials were refused more than 5 times is
	// answered 429 Too Many Requests with Retry-After, for 1 s after the
	// next refusal, doubling with each one up to 5 min, until its
	// credentials are accepted or 15 min pass without a refusal
	// (internal/authlimit's defaults). Behind a proxy, every client it
	// forwards shares its address.
	HTPasswdFile string
	// Realm is the basic-auth realm; DefaultRealm if empty.
	Realm string
	// TLSCertFile and TLSKeyFile, when both set, make Serve and
	// ListenAndServe speak HTTPS. Setting only one is an error.
	TLSCertFile string
	TLSKeyFile  string
}

// Option configures a Server beyond its Config.
type Option func(*options) error

type options struct {
	logger *slog.Logger
}

// WithLogger sends distribution's log entries to logger, at the levels
// logger enables. The default discards everything.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) error {
		if logger == nil {
			return errors.New("registry: WithLogger: nil logger")
		}
		o.logger = logger
		return nil
	}
}

// Server is a running embedded registry. It is an http.Handler, so it can be
// mounted behind httptest or any listener; ListenAndServe and Serve run it on
// their own http.Server, which Shutdown stops gracefully.
type Server struct {
	cfg       Config
	handler   http.Handler
	apps      *appSwitch
	tlsConfig *tls.Config
	logSink   *logSink
	stop      context.CancelFunc // stops following the maintenance flag

	// mu guards httpSrv and closing: Serve and Shutdown run on different
	// goroutines, and a Shutdown that comes before Serve must still stop it.
	mu      sync.Mutex
	httpSrv *http.Server
	closing bool
}

var _ http.Handler = (*Server)(nil)

// New builds a registry from cfg. ctx bounds the registry's background work
// (upload purging); cancel it or call Shutdown to stop.
func New(ctx context.Context, cfg Config, opts ...Option) (s *Server, err error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s = &Server{cfg: cfg}
	if cfg.TLSCertFile != "" {
		cert, err := confine.LoadKeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("registry: TLS key pair: %w", err)
		}
		s.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	driver, err := cfg.openDriver(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.RootDir != "" {
		if err := migrateLegacySideFiles(ctx, cfg.RootDir, driver); err != nil {
			return nil, err
		}
	}
	if cfg.HTTPSecret == "" && cfg.S3 != nil {
		if cfg.HTTPSecret, err = sharedHTTPSecret(ctx, driver); err != nil {
			return nil, err
		}
	}
	dcfg, err := cfg.distribution()
	if err != nil {
		return nil, err
	}
	var access auth.AccessController
	if cfg.HTPasswdFile != "" {
		access, err = auth.GetAccessController("htpasswd", dcfg.Auth.Parameters())
		if err != nil {
			return nil, fmt.Errorf("registry: htpasswd %s: %w", cfg.HTPasswdFile, err)
		}
	}
	catalog := newCatalogIndex(driver)
	if done, err := catalog.indexed(ctx); err != nil {
		return nil, fmt.Errorf("registry: storage %s: %w", cfg.storageName(), err)
	} else if !done {
		if err := catalog.rebuild(ctx); err != nil {
			return nil, fmt.Errorf("registry: storage %s: %w", cfg.storageName(), err)
		}
	}
	readOnly := false
	if cfg.RootDir != "" || cfg.S3 != nil {
		if readOnly, err = readOnlyFlagSet(ctx, driver); err != nil {
			return nil, fmt.Errorf("registry: storage %s: %w", cfg.storageName(), err)
		}
	}

	s.logSink = registerLogger(o.logger)
	s.apps = &appSwitch{ctx: ctx, base: dcfg, log: s.logSink.logger}
	if err := s.apps.set(readOnly); err != nil {
		s.logSink.unregister()
		return nil, err
	}
	fctx, stop := context.WithCancel(ctx)
	s.stop = stop
	if cfg.RootDir != "" || cfg.S3 != nil {
		poll := cfg.MaintenancePoll
		if poll <= 0 {
			poll = DefaultMaintenancePoll
		}
		go s.apps.follow(fctx, driver, poll)
	}
	var app http.Handler = s.apps
	if cfg.RootDir != "" {
		app = &blobFiles{next: s.apps, root: cfg.RootDir}
	}
	s.handler = &referrersHandler{next: app, index: &referrerIndex{d: driver}, aliases: &aliasIndex{d: driver}, catalog: catalog, access: access}
	if cfg.RootDir != "" {
		s.handler = &spaceGuard{next: s.handler, root: cfg.RootDir, driver: driver, access: access}
	}
	if access != nil {
		s.handler = authlimit.New(authlimit.Options{}).Handler(s.handler)
	}
	return s, nil
}

// ReadOnly reports whether the registry is in read-only maintenance mode
// now: it serves pulls and refuses pushes and deletes.
func (s *Server) ReadOnly() bool { return s.apps.readOnly() }

// ServeHTTP serves the OCI distribution API. A panic while serving (in
// distribution or in ferry) is logged at error level with its stack and
// answered 500 UNKNOWN; when the response had begun, the connection is
// closed, as the client could not tell a cut-off body from a whole one.
// Credentials come in Authorization or, when that is absent, in
// cluster.ForwardedAuthHeader (through the Kubernetes API server's pods/proxy, which
// takes Authorization for itself); every answer carries cluster.ServedHeader.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gw := &guardWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler { // net/http's own way to abort a response
			panic(v)
		}
		s.logSink.logger.LogAttrs(r.Context(), slog.LevelError, "registry: panic serving a request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr),
			slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
		if gw.wrote {
			panic(http.ErrAbortHandler)
		}
		writeError(w, http.StatusInternalServerError, "UNKNOWN", "internal server error")
	}()
	if s.cfg.RootDir != "" {
		largeWrites(r)
	}
	cluster.AcceptForwardedAuth(gw, r) // credentials through the API server's pods/proxy
	s.handler.ServeHTTP(gw, r)
}

// guardWriter records whether a response has begun.
type guardWriter struct {
	http.ResponseWriter
	wrote bool
}

func (g *guardWriter) WriteHeader(code int) {
	if code >= 200 { // 1xx informational headers are not the response
		g.wrote = true
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *guardWriter) Write(b []byte) (int, error) {
	g.wrote = true
	return g.ResponseWriter.Write(b)
}

// ReadFrom keeps the connection's own ReadFrom (sendfile for blobs on the
// filesystem) in reach of io.Copy.
func (g *guardWriter) ReadFrom(src io.Reader) (int64, error) {
	g.wrote = true
	if rf, ok := g.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{g.ResponseWriter}, src)
}

// Flush passes a flush on.
func (g *guardWriter) Flush() {
	g.wrote = true
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (g *guardWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// TLS reports whether Serve speaks HTTPS.
func (s *Server) TLS() bool { return s.tlsConfig != nil }

// ListenAndServe listens on Config.Addr (DefaultAddr if empty) and serves
// until Shutdown; it then returns http.ErrServerClosed.
func (s *Server) ListenAndServe() error {
	addr := s.cfg.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("registry: listen %s: %w", addr, err)
	}
	return s.Serve(l)
}

// Serve serves on l (wrapping it in TLS when configured) until Shutdown; it
// then returns http.ErrServerClosed. A Server serves at most one listener.
// After Shutdown, even one that came first, Serve closes l and returns
// http.ErrServerClosed at once.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		_ = l.Close()
		return http.ErrServerClosed
	case s.httpSrv != nil:
		s.mu.Unlock()
		return errors.New("registry: already serving")
	}
	if s.tlsConfig != nil {
		l = tls.NewListener(l, s.tlsConfig)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.logSink.logger.Handler(), slog.LevelDebug),
	}
	s.httpSrv = srv
	s.mu.Unlock()
	// A Shutdown between the unlock and here is seen by srv.Serve, which
	// then returns http.ErrServerClosed.
	return srv.Serve(l)
}

// Shutdown stops accepting connections and waits for in-flight requests
// (uploads included) to finish; when ctx ends first it closes the remaining
// connections, so an interrupted chunked upload is left as an incomplete
// session that a client can not complete and that the upload purger removes.
// It then stops the registry's background work. A Serve called before or
// after Shutdown returns http.ErrServerClosed; Shutdown may be called more
// than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closing
	s.closing = true
	srv := s.httpSrv
	s.mu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
	if !first {
		return err
	}
	s.stop()
	if aerr := s.apps.shutdown(); aerr != nil && err == nil {
		err = aerr
	}
	s.logSink.unregister()
	return err
}

// MaxHtpasswdSize bounds the htpasswd file (4 MiB: some 40,000 bcrypt
// entries).
const MaxHtpasswdSize = 4 << 20

// checkHtpasswd checks that an htpasswd file holds only user:bcrypt-hash
// lines (and blank ones), as distribution's reader takes them.
func checkHtpasswd(b []byte) error {
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" || !strings.HasPrefix(hash, "$2") {
			return fmt.Errorf("line %d is not user:bcrypt-hash", i+1)
		}
	}
	return nil
}

func (c Config) validate() error {
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("registry: TLS needs both a certificate and a key file")
	}
	if c.HTPasswdFile != "" {
		// distribution creates a missing htpasswd file with a random admin
		// password; we refuse instead.
		// distribution reads it whole, and again as it changes: it must be
		// a regular file of a bounded size.
		b, err := confine.ReadPath(c.HTPasswdFile, MaxHtpasswdSize)
		if err != nil {
			return fmt.Errorf("registry: htpasswd file: %w", err)
		}
		if err := checkHtpasswd(b); err != nil {
			return fmt.Errorf("registry: htpasswd file %s: %w", c.HTPasswdFile, err)
		}
	}
	if c.S3 != nil {
		if c.RootDir != "" {
			return errors.New("registry: storage is either a root directory or S3, not both")
		}
		if err := c.S3.validate(); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	if c.RootDir != "" {
		if !filepath.IsAbs(c.RootDir) {
			return fmt.Errorf("registry: storage root %s is not an absolute path", c.RootDir)
		}
		if err := os.MkdirAll(c.RootDir, 0o755); err != nil {
			return fmt.Errorf("registry: storage root: %w", err)
		}
	}
	return nil
}

// distribution translates c into distribution's configuration.
func (c Config) distribution() (*configuration.Configuration, error) {
	d := &configuration.Configuration{Version: "0.1"}
	d.HTTP.Secret = c.HTTPSecret
	if d.HTTP.Secret == "" {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("registry: HTTP secret: %w", err)
		}
		d.HTTP.Secret = fmt.Sprintf("%x", secret)
	}
	d.Log.Level = "error"
	// configuration.Parse fills in defaults that a Configuration built in
	// code lacks. With catalog.maxentries 0, GET /v2/_catalog listed no
	// repository and refused any n. (tags.maxtags 0 means no limit.)
	d.Catalog.MaxEntries = catalogMaxEntries
	// Non-distributable layers carry urls and their blobs are never pushed.
	// With no allow list, distribution refuses every URL (and answered such
	// manifests with a 500); allow any http or https URL, as the image spec
	// and other registries do. distribution still refuses other schemes and
	// fragments, which checkManifest answers with a 400 first.
	d.Validation.Manifests.URLs.Allow = []string{`^https?://`}
	d.Storage = configuration.Storage{
		"delete": configuration.Parameters{"enabled": !c.DisableDelete},
		"cache":  configuration.Parameters{"blobdescriptor": "inmemory"},
	}
	name, params := c.storageDriver()
	d.Storage[name] = params
	if name == "filesystem" {
		d.Middleware = map[string][]configuration.Middleware{
			"storage": {{Name: writebackMiddleware, Options: configuration.Parameters{"rootdirectory": c.RootDir}}},
		}
	}
	d.Storage["maintenance"] = configuration.Parameters{
		"uploadpurging": map[any]any{"enabled": true, "age": UploadPurgeAge.String(), "interval": UploadPurgeInterval.String(), "dryrun": false},
	}
	switch name {
	case "inmemory":
		d.Storage["maintenance"] = configuration.Parameters{
			"uploadpurging": map[any]any{"enabled": false},
		}
	case sharedS3Driver:
		// Blob GETs are served through the registry, never redirected to
		// the object store: clients (nodes of an air-gapped cluster) may
		// not reach it.
		d.Storage["redirect"] = configuration.Parameters{"disable": true}
		// Several registries share the bucket: a blob descriptor cached by
		// one would outlive a delete through another.
		delete(d.Storage, "cache")
	}
	if c.HTPasswdFile != "" {
		realm := c.Realm
		if realm == "" {
			realm = DefaultRealm
		}
		d.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": realm, "path": c.HTPasswdFile}}
	}
	return d, nil
}

// ServeUntil serves on l until ctx is done, then shuts down gracefully,
// giving in-flight requests up to grace to finish. It returns nil after a
// clean shutdown.
func (s *Server) ServeUntil(ctx context.Context, l net.Listener, grace time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	select {
	case err := <-served:
		_ = s.Shutdown(context.Background())
		return fmt.Errorf("serve %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.Shutdown(sctx)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
