package centre

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/authlimit"
)

// problem is a refusal: its sentence, the HTTP status it is answered with,
// and the sentinel it is (errors.Is), if any.
type problem struct {
	status int
	msg    string
	is     error
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.is }

// refuse makes a refusal answered with status.
func refuse(status int, is error, format string, a ...any) *problem {
	return &problem{status: status, msg: oneLine(fmt.Sprintf(format, a...)), is: is}
}

// notFound turns the API server's NotFound into a refusal saying format
// (404, ErrNotFound); other errors are failures to read what (a kind and
// a name: "member m").
func notFound(err error, what string, format string, a ...any) error {
	if apierrors.IsNotFound(err) {
		return refuse(http.StatusNotFound, ErrNotFound, format, a...)
	}
	return fmt.Errorf("read %s from the management cluster: %w", what, err)
}

// Handler serves the member endpoints of package wire (join, sync, bundle)
// under their paths; anything else is 404. Each refusal is one sentence in
// a wire.Problem. Request bodies are bounded by wire's Max* sizes; time is
// the server's to bound: serve it over TLS (EnsureCA) with an http.Server
// whose ReadHeaderTimeout and ReadTimeout bound slow senders (a bundle
// request carries up to 64 MiB) and whose WriteTimeout, if any, leaves a
// bundle time to stream.
func (c *Centre) Handler() http.Handler {
	c.init()
	return http.HandlerFunc(c.serveHTTP)
}

type endpoint func(w http.ResponseWriter, r *http.Request) (member string, err error)

func (c *Centre) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var serve endpoint
	switch r.URL.Path {
	case wire.PathJoin:
		serve = c.serveJoin
	case wire.PathSync:
		serve = c.serveSync
	case wire.PathBundle:
		serve = c.serveBundle
	default:
		c.fail(w, r, "", refuse(http.StatusNotFound, nil, "no fleet endpoint at %s", truncate(r.URL.Path)))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		c.fail(w, r, "", refuse(http.StatusMethodNotAllowed, nil, "POST to %s", r.URL.Path))
		return
	}
	attempt, no := c.guesses.Begin(guessKey(r))
	if no != nil {
		w.Header().Set("Retry-After", strconv.Itoa(no.Seconds()))
		what := "too many refused tokens or credentials"
		if no.InFlight {
			what = "too many requests in flight"
		}
		c.fail(w, r, "", refuse(http.StatusTooManyRequests, nil, "%s from %s: try again in %d s", what, authlimit.ClientKey(r), no.Seconds()))
		return
	}
	defer attempt.End(0)
	member, err := serve(w, r)
	if err != nil {
		if p := (*problem)(nil); errors.As(err, &p) && p.status == http.StatusUnauthorized {
			attempt.End(http.StatusUnauthorized)
		}
		c.fail(w, r, member, err)
		return
	}
	attempt.End(http.StatusOK)
	level := c.log().Info
	if r.URL.Path == wire.PathSync {
		level = c.log().Debug
	}
	level("fleet "+strings.TrimPrefix(r.URL.Path, "/fleet/v1/"), "member", member, "took", time.Since(start).Round(time.Millisecond).String())
}

// guessKey is whose refused tokens and credentials slow down a request
// (internal/authlimit): a join's address; a sync's or bundle's address
// and the member its credential names, so that one guessing a member's
// credential from a site's address does not slow down the site's others.
func guessKey(r *http.Request) string {
	key := authlimit.ClientKey(r)
	if r.URL.Path == wire.PathJoin {
		return key
	}
	cred, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if name, _, err := wire.ParseCredential(strings.TrimSpace(cred)); err == nil {
		key += " " + name
	}
	return key
}

// fail answers err: a refusal with its status, anything else 500 (503 for
// the API server's or the registry's unavailability); both as a
// wire.Problem of one line, and logged.
func (c *Centre) fail(w http.ResponseWriter, r *http.Request, member string, err error) {
	status := http.StatusInternalServerError
	var p *problem
	switch {
	case errors.As(err, &p):
		status = p.status
	case apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		status = http.StatusServiceUnavailable
	}
	msg := oneLine(err.Error())
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ferry-fleet"`)
	}
	writeJSON(w, status, wire.Problem{Error: msg})
	level := c.log().Warn
	if status == http.StatusTooManyRequests {
		level = c.log().Debug // one line per guess is what the wait saves
	}
	level("fleet request refused", "path", truncate(r.URL.Path), "status", status, "member", member, "reason", msg, "remote", r.RemoteAddr)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":"the answer could not be encoded"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// readJSON reads a request's body of at most limit bytes into v, within
// the centre's StallTimeout (a bundle request's: each read within it): a
// larger one is 413, one that is not in in time 408, one that is not
// JSON of v's shape 400.
func (c *Centre) readJSON(w http.ResponseWriter, r *http.Request, limit int64, what string, v any) error {
	rc := http.NewResponseController(w)
	body := io.Reader(http.MaxBytesReader(w, r.Body, limit))
	if r.URL.Path == wire.PathBundle {
		body = &progressReader{r: body, rc: rc, stall: c.stall()}
	} else {
		_ = rc.SetReadDeadline(time.Now().Add(c.stall())) // not every writer can: the server's ReadTimeout then
	}
	data, err := readAll(body, r.ContentLength, limit)
	_ = rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return refuse(http.StatusRequestEntityTooLarge, nil, "the %s is larger than the centre takes (%d bytes)", what, limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refuse(http.StatusRequestTimeout, nil, "the %s did not come in within %s", what, c.stall())
	case err != nil:
		return refuse(http.StatusBadRequest, nil, "the %s broke off: %v", what, err)
	case len(data) == 0:
		return refuse(http.StatusBadRequest, nil, "the %s is empty: send it as JSON", what)
	}
	var bound *wire.BoundError
	switch err := json.Unmarshal(data, v); {
	case errors.As(err, &bound):
		return refuse(http.StatusRequestEntityTooLarge, nil, "%v", err)
	case err != nil:
		return refuse(http.StatusBadRequest, nil, "the %s is not JSON of its shape: %v", what, err)
	}
	return nil
}

// readAll reads body whole: into a buffer of its declared length (at most
// limit; net/http holds a body to it) when it declares one, rather than
// one grown by doubling.
func readAll(body io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(body)
	}
	data := make([]byte, declared)
	n, err := io.ReadFull(body, data)
	return data[:n], err
}

// progressReader reads a request's body, each read within stall.
type progressReader struct {
	r     io.Reader
	rc    *http.ResponseController
	stall time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	_ = p.rc.SetReadDeadline(time.Now().Add(p.stall))
	return p.r.Read(b)
}

// progressWriter writes an answer, each write within stall: a reader that
// stops reading is cut off.
type progressWriter struct {
	w     io.Writer
	rc    *http.ResponseController
	stall time.Duration
}

func (p *progressWriter) Write(b []byte) (int, error) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(p.stall))
	return p.w.Write(b)
}

// only lets one request of a member to an endpoint in at a time: a
// member's agent asks for one thing at a time, so a second is one too
// many (429), and what a member can make the centre hold is one
// request's worth. done lets the next in.
func (c *Centre) only(path, member string) (done func(), err error) {
	key := path + " " + member
	if _, busy := c.inFlight.LoadOrStore(key, struct{}{}); busy {
		return nil, refuse(http.StatusTooManyRequests, nil, "member %s has a %s request in flight: one at a time", member, strings.TrimPrefix(path, "/fleet/v1/"))
	}
	return func() { c.inFlight.Delete(key) }, nil
}

// recheck reads the member m again, as it is now, after a wait (for a
// slot, for a delta): deleted or revoked is 403, a new credential 401.
func (c *Centre) recheck(ctx context.Context, m *v1alpha1.Member) (*v1alpha1.Member, error) {
	now, err := c.member(ctx, m.Name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, refuse(http.StatusForbidden, ErrNotFound, "member %s is not in the fleet (deleted)", m.Name)
	case err != nil:
		return nil, err
	case now.Spec.Revoked:
		return nil, refuse(http.StatusForbidden, ErrRevoked, "member %s is revoked", m.Name)
	case now.Status.Credential != m.Status.Credential:
		return nil, refuse(http.StatusUnauthorized, nil, "the credential is not member %s's any more", m.Name)
	}
	return now, nil
}

// authenticate finds the member whose credential the request bears: no
// or a malformed credential is 401, a member deleted or revoked 403, a
// wrong secret 401. It reads the Member on every request, so that a
// revocation cuts it off at once.
func (c *Centre) authenticate(r *http.Request) (*v1alpha1.Member, error) {
	cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(cred) == "" {
		return nil, refuse(http.StatusUnauthorized, nil, "no member credential: send it as Authorization: Bearer <credential>")
	}
	name, secret, err := wire.ParseCredential(strings.TrimSpace(cred))
	if err != nil {
		return nil, refuse(http.StatusUnauthorized, nil, "%v", err)
	}
	m, err := c.member(r.Context(), name)
	if errors.Is(err, ErrNotFound) {
		return nil, refuse(http.StatusForbidden, ErrNotFound, "member %s is not in the fleet (deleted or never joined)", name)
	}
	if err != nil {
		return nil, err
	}
	if m.Spec.Revoked {
		return nil, refuse(http.StatusForbidden, ErrRevoked, "member %s is revoked", name)
	}
	if m.Status.Credential == "" || !wire.SameHash(secret, m.Status.Credential) {
		return nil, refuse(http.StatusUnauthorized, nil, "the credential is not member %s's", name)
	}
	return m, nil
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// truncate shortens what a caller sent before it is repeated.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
