// Package dashboard is ferry's web UI: what is deployed where (Packages,
// their graphs, what they installed and whether it is ready), the
// in-cluster registry, and the upload of a signed package archive, with
// the archive inspected and verified first.
//
// It acts as its user: with the kubeconfig's credentials when it serves
// only loopback, so RBAC applies as it does to kubectl; off loopback it
// asks each browser to log in with a Kubernetes bearer token (checked with
// a TokenReview) and acts with that token. Every page is rendered on the
// server from embedded templates; the only script is the upload's
// progress and the digests' copy buttons.
//
// What it guards against: other sites (every state-changing request needs
// the session's CSRF token, and a cross-site request is refused whatever
// it carries), DNS rebinding (the Host header must name the dashboard),
// framing and injected script (a strict Content-Security-Policy), and
// sessions stolen from the page (HttpOnly, SameSite=Strict cookies,
// Secure under TLS).
package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Cluster is one kubeconfig context the dashboard shows.
type Cluster struct {
	// Name is the context's name, as pages and URLs name the cluster.
	Name string
	// Config reaches its API server with the kubeconfig's credentials.
	Config *rest.Config
}

// Options configure a Server.
type Options struct {
	// Clusters are the contexts to show, the first the default. Required.
	Clusters []Cluster
	// Namespace is ferry's namespace in each cluster.
	Namespace string
	// Hosts are the values the Host header may take (host:port), so that
	// a page of another site cannot reach the dashboard by DNS rebinding.
	// Required.
	Hosts []string
	// Login makes every browser log in with a bearer token, which the
	// dashboard then acts with; without it, it acts with the kubeconfig's
	// credentials and must serve loopback only.
	Login bool
	// TLS says the dashboard is served over HTTPS: cookies are Secure and
	// browsers are told to keep to HTTPS.
	TLS bool
	// SessionTTL bounds a login; 8h if 0.
	SessionTTL time.Duration
	// AllowPaths lets the inspect page open archives by a path on the
	// dashboard's machine (only sensible when the browser is on it).
	AllowPaths bool
	// AdvisoryMaxAge is the age past which the findings pages show a
	// cluster's (or the fleet's) advisory database as old;
	// DefaultAdvisoryMaxAge (30 days) if 0.
	AdvisoryMaxAge time.Duration
	// Fleet, if set, adds the fleet pages: the first cluster is the
	// fleet's management cluster.
	Fleet *FleetOptions
	// Logger receives a line per refused request, per upload and per
	// fleet action; nil discards.
	Logger *slog.Logger
}

// Server is the dashboard's HTTP handler.
type Server struct {
	opts    Options
	pages   map[string]*template.Template
	mux     *http.ServeMux
	secret  []byte // signs CSRF tokens
	cop     *http.CrossOriginProtection
	log     *slog.Logger
	started time.Time

	mu       sync.Mutex
	sessions map[string]*session // by id
	actors   map[string]*actor   // by cluster and credential
	flashes  flash
	sboms    sbomCache
	dbs      dbCache
	fleetReg fleetRegistry // the centre's registry, opened on first use

	// fleetClient and fleetActions make an actor's client of the
	// management cluster and the centre's verbs over it (tests swap
	// them).
	fleetClient  func(*rest.Config) (client.WithWatch, error)
	fleetActions func(client.WithWatch) fleetActions
	maxReport    int64 // bounds an imported report: wire.MaxReportFile
}

// session is one browser's.
type session struct {
	id      string
	user    string // login: who the token is
	token   string // login: the bearer token acted with
	expires time.Time
}

// New returns a dashboard for opts.
func New(opts Options) (*Server, error) {
	if len(opts.Clusters) == 0 {
		return nil, errors.New("dashboard: no cluster to show")
	}
	if len(opts.Hosts) == 0 {
		return nil, errors.New("dashboard: no Host the dashboard answers to")
	}
	for _, c := range opts.Clusters {
		if c.Name == "" || c.Config == nil {
			return nil, errors.New("dashboard: a cluster needs a name and a config")
		}
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 8 * time.Hour
	}
	s := &Server{
		opts: opts, mux: http.NewServeMux(), secret: make([]byte, 32),
		cop: http.NewCrossOriginProtection(), log: opts.Logger, started: time.Now(),
		sessions: map[string]*session{}, actors: map[string]*actor{},
		fleetClient: newFleetClient, fleetActions: newCentre(opts.Fleet), maxReport: wire.MaxReportFile,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	_, _ = rand.Read(s.secret)
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /login", s.loginPage)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.mux.HandleFunc("GET /{$}", s.packagesPage)
	s.mux.HandleFunc("GET /c/{cluster}/packages/{namespace}/{name}", s.packagePage)
	s.mux.HandleFunc("GET /c/{cluster}/packages/{namespace}/{name}/sboms/{digest}", s.sbomPage)
	s.mux.HandleFunc("GET /c/{cluster}/packages/{namespace}/{name}/sboms/{digest}/document", s.sbomDocument)
	s.mux.HandleFunc("GET /c/{cluster}/packages/{namespace}/{name}/audit", s.auditPage)
	s.mux.HandleFunc("GET /c/{cluster}/sbom/search", s.searchPage)
	s.mux.HandleFunc("GET /c/{cluster}/sbom/audit", s.auditPage)
	s.mux.HandleFunc("GET /sbom/search", s.redirectToCluster("search"))
	s.mux.HandleFunc("GET /sbom/audit", s.redirectToCluster("audit"))
	s.mux.HandleFunc("GET /c/{cluster}/registry", s.registryPage)
	s.mux.HandleFunc("POST /c/{cluster}/registry/usage", s.registryUsage)
	s.mux.HandleFunc("GET /c/{cluster}/upload", s.uploadPage)
	s.mux.HandleFunc("POST /c/{cluster}/upload", s.upload)
	s.mux.HandleFunc("POST /c/{cluster}/inspect", s.inspect)
	if opts.Fleet != nil {
		s.mux.HandleFunc("GET /fleet", s.fleetPage)
		s.mux.HandleFunc("GET /fleet/matrix", s.matrixPage)
		s.mux.HandleFunc("GET /fleet/rollouts", s.rolloutsPage)
		s.mux.HandleFunc("GET /fleet/placements/{name}", s.placementPage)
		s.mux.HandleFunc("POST /fleet/placements/{name}/rollback", s.rollback)
		s.mux.HandleFunc("GET /fleet/tracks/{name}", s.trackPage)
		s.mux.HandleFunc("POST /fleet/tracks/{name}/promote", s.promote)
		s.mux.HandleFunc("GET /fleet/members/{name}", s.memberPage)
		s.mux.HandleFunc("POST /fleet/members/{name}/bundle", s.bundle)
		s.mux.HandleFunc("GET /fleet/members/{name}/values", s.values)
		s.mux.HandleFunc("POST /fleet/import", s.importReport)
		s.mux.HandleFunc("GET /fleet/sbom/search", s.fleetSearchPage)
		s.mux.HandleFunc("GET /fleet/sbom/audit", s.fleetAuditPage)
	}
	return s, nil
}

// Close closes the ways to the clusters' registries.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, a := range s.actors {
		a.close()
		delete(s.actors, k)
	}
	return nil
}

// ServeHTTP checks every request (Host, origin, session, CSRF), sets the
// security headers, then serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if s.opts.TLS {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	if !slices.Contains(s.opts.Hosts, strings.ToLower(r.Host)) {
		s.refuse(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("this dashboard does not answer to host %.64q", r.Host))
		return
	}
	if err := s.cop.Check(r); err != nil {
		s.refuse(w, r, http.StatusForbidden, "cross-origin request refused")
		return
	}
	if strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "public, max-age=3600")
		s.mux.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	sess := s.session(w, r)
	if !safeMethod(r.Method) && !s.validCSRF(sess, r) {
		s.refuse(w, r, http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
		return
	}
	if s.opts.Login && sess.token == "" && r.URL.Path != "/login" {
		if r.Method == http.MethodGet {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		s.refuse(w, r, http.StatusUnauthorized, "log in first")
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
}

type sessionKey struct{}

func sessionOf(r *http.Request) *session {
	sess, _ := r.Context().Value(sessionKey{}).(*session)
	if sess == nil {
		return &session{}
	}
	return sess
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

const cookieName = "ferry_session"

// session returns the browser's session, starting one (and setting its
// cookie) if it has none or an expired one.
func (s *Server) session(w http.ResponseWriter, r *http.Request) *session {
	now := time.Now()
	if c, err := r.Cookie(cookieName); err == nil {
		s.mu.Lock()
		sess := s.sessions[c.Value]
		if sess != nil && now.After(sess.expires) {
			delete(s.sessions, c.Value)
			sess = nil
		}
		s.mu.Unlock()
		if sess != nil {
			return sess
		}
	}
	sess := &session{id: randomID(), expires: now.Add(s.opts.SessionTTL)}
	s.mu.Lock()
	for id, old := range s.sessions { // expired sessions go, and their clients
		if now.After(old.expires) {
			delete(s.sessions, id)
			s.dropActors(id)
		}
	}
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	s.setCookie(w, sess.id, sess.expires)
	// The request that started it carries no cookie: it must not fail its
	// CSRF check for want of one, so it is given the new session.
	r.AddCookie(&http.Cookie{Name: cookieName, Value: sess.id})
	return sess
}

func (s *Server) setCookie(w http.ResponseWriter, value string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: "/", Expires: expires,
		HttpOnly: true, Secure: s.opts.TLS, SameSite: http.SameSiteStrictMode,
	})
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// csrfToken is the session's CSRF token: an HMAC of its id.
func (s *Server) csrfToken(sess *session) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("csrf\x00" + sess.id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validCSRF checks the token of a state-changing request: the
// X-CSRF-Token header, or the form's csrf field (a multipart form's is in
// the query, so that the body is never buffered).
func (s *Server) validCSRF(sess *session, r *http.Request) bool {
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.URL.Query().Get("csrf")
	}
	if got == "" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		r.Body = http.MaxBytesReader(nil, r.Body, 64<<10)
		got = r.PostFormValue("csrf")
	}
	want := s.csrfToken(sess)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// refuse answers a refused request with one line, as a page for browsers.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.log.Warn("dashboard refused", "status", status, "method", r.Method, "path", r.URL.Path, "reason", msg, "remote", r.RemoteAddr)
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_ = s.pages["error"].ExecuteTemplate(w, "layout", errorView{view: view{Title: http.StatusText(status)}, Status: status, Message: msg})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, oneLine(msg))
}

// loginPage asks for a bearer token.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Login {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, "login", &loginView{view: s.view(r, "Log in")})
}

// login checks a bearer token with a TokenReview (with the kubeconfig's
// credentials) and, if the API server knows it, starts a new session
// acting with it.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Login {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	fail := func(status int, msg string) {
		s.log.Warn("dashboard login refused", "reason", msg, "remote", r.RemoteAddr)
		s.renderStatus(w, r, status, "login", &loginView{view: s.view(r, "Log in"), Error: msg})
	}
	if token == "" {
		fail(http.StatusUnauthorized, "paste a Kubernetes bearer token (kubectl create token NAME, or your OIDC id-token)")
		return
	}
	cs, err := kubernetes.NewForConfig(s.opts.Clusters[0].Config)
	if err != nil {
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	tr, err := cs.AuthenticationV1().TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		fail(http.StatusServiceUnavailable, "token review: "+oneLine(err.Error()))
		return
	}
	if !tr.Status.Authenticated {
		fail(http.StatusUnauthorized, "the cluster does not know this token")
		return
	}
	// A new session id on login: one set before it is not trusted after.
	old := sessionOf(r)
	sess := &session{id: randomID(), user: tr.Status.User.Username, token: token, expires: time.Now().Add(s.opts.SessionTTL)}
	s.mu.Lock()
	delete(s.sessions, old.id)
	s.dropActors(old.id)
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	s.setCookie(w, sess.id, sess.expires)
	s.log.Info("dashboard login", "user", sess.user, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	s.mu.Lock()
	delete(s.sessions, sess.id)
	s.dropActors(sess.id)
	s.mu.Unlock()
	s.setCookie(w, "", time.Unix(1, 0))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// dropActors closes and forgets the actors of session id (with Login,
// each session has its own); s.mu is held.
func (s *Server) dropActors(id string) {
	for k, a := range s.actors {
		if strings.HasSuffix(k, "\x00"+id) {
			a.close()
			delete(s.actors, k)
		}
	}
}

// cluster is the request's cluster, by its {cluster} path value.
func (s *Server) cluster(r *http.Request) (Cluster, bool) {
	name := r.PathValue("cluster")
	for _, c := range s.opts.Clusters {
		if c.Name == name {
			return c, true
		}
	}
	return Cluster{}, false
}

// clusterActor is the request's actor in its {cluster}; if there is
// none, the request has been answered.
func (s *Server) clusterActor(w http.ResponseWriter, r *http.Request) (*actor, bool) {
	c, ok := s.cluster(r)
	if !ok {
		s.refuse(w, r, http.StatusNotFound, fmt.Sprintf("no cluster %.64q", r.PathValue("cluster")))
		return nil, false
	}
	a, err := s.actor(r, c)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return a, true
}

// loopbackOnly reports whether addr (host:port) is on loopback, where the
// dashboard may act with the kubeconfig's credentials without a login.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// HostsFor are the Host header values a dashboard listening on addr
// answers to, given the names it is published under (host or host:port).
// On loopback, localhost and the loopback address; otherwise the names
// and the address itself.
func HostsFor(addr string, names ...string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	hosts := []string{strings.ToLower(net.JoinHostPort(host, port))}
	if loopbackOnly(addr) {
		hosts = append(hosts, "localhost:"+port, "127.0.0.1:"+port, "[::1]:"+port)
	}
	for _, n := range names {
		if _, _, err := net.SplitHostPort(n); err != nil {
			n = net.JoinHostPort(n, port)
		}
		hosts = append(hosts, strings.ToLower(n))
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// Loopback reports whether addr is on loopback only.
func Loopback(addr string) bool { return loopbackOnly(addr) }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
