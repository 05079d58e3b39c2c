package upload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// Defaults of a Server.
const (
	// DefaultIdleTimeout drops an upload whose stream stalls this long.
	DefaultIdleTimeout = time.Minute
	// DefaultParallel uploads are spooled and pushed at once; more wait.
	DefaultParallel = 2
)

// Server is the agent's upload endpoint (see the package comment). Its
// zero value is not usable: Client, Packages and Namespace are required.
type Server struct {
	// Client is the agent's own: token and access reviews, the trusted
	// keys, the registry's Service and account.
	Client kubernetes.Interface
	// Packages creates, updates and watches Packages.
	Packages client.WithWatch
	// Namespace is ferry's.
	Namespace string
	// Registry is where the agent reaches the in-cluster registry
	// (host:port); the registry Service's cluster IP and port if empty.
	Registry string
	// Dir is where uploads are spooled; os.TempDir() if empty.
	Dir string
	// MaxBytes bounds an upload's size; no bound but the disk's if 0.
	MaxBytes int64
	// IdleTimeout: DefaultIdleTimeout if 0.
	IdleTimeout time.Duration
	// Logger receives one line per upload; nil discards.
	Logger *slog.Logger

	once  sync.Once
	slots chan struct{}
}

// user is an authenticated caller.
type user struct {
	info authenticationv1.UserInfo
}

func (u user) String() string { return u.info.Username }

// httpError is a refusal before the event stream starts.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func refuse(status int, format string, a ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, a...)}
}

// ServeHTTP takes one upload.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	res, err := s.serve(w, r)
	var he *httpError
	switch {
	case errors.As(err, &he):
		if he.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ferry"`)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(he.status)
		_, _ = io.WriteString(w, oneLine(he.msg)+"\n")
		log.Warn("upload refused", "status", he.status, "reason", oneLine(he.msg), "remote", r.RemoteAddr)
	case err != nil:
		log.Warn("upload failed", "error", oneLine(err.Error()), "took", time.Since(start).Round(time.Millisecond).String())
	default:
		log.Info("upload", "user", res.User, "package", res.Name, "version", res.Version, "digest", res.Digest,
			"received", res.Received, "pushed", res.Pushed, "ready", res.Ready, "took", time.Since(start).Round(time.Millisecond).String())
	}
}

// serve returns an *httpError before the stream starts; after, errors are
// sent as an error event and returned for the log.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) (*Result, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, refuse(http.StatusMethodNotAllowed, "POST a package archive to %s", Path)
	}
	ctx := r.Context()
	u, err := s.authenticate(ctx, r)
	if err != nil {
		return nil, err
	}
	// Before a byte is read: may this user apply Packages at all?
	if err := s.authorize(ctx, u, "create", "update"); err != nil {
		return nil, err
	}
	opts, err := ParseOptions(r.URL.Query())
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "%v", err)
	}
	values, err := deploy.ParseSet(opts.Set)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "%v", err)
	}
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()

	res := &Result{User: u.String(), Namespace: s.Namespace}
	t0 := time.Now()
	path, size, err := s.spool(w, r)
	if path != "" {
		defer os.Remove(path)
	}
	if err != nil {
		return nil, err
	}
	res.Received, res.Took.Receive = size, time.Since(t0)

	// Verified against the keys the cluster trusts before anything is
	// written anywhere.
	t0 = time.Now()
	name := opts.Source
	if name == "" {
		name = "the uploaded archive"
	}
	pkg, err := artifact.OpenAs(ctx, path, name)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "not a ferry package: %v", err)
	}
	keys, err := s.trustedKeys(ctx)
	if err != nil {
		return nil, err
	}
	vr, err := artifact.Verify(ctx, pkg, "", artifact.VerifyOptions{Keys: keys})
	if err != nil {
		return nil, refuse(http.StatusUnprocessableEntity, "%v", err)
	}
	res.Took.Verify = time.Since(t0)
	cfg := pkg.Config()
	res.Name, res.Version, res.Digest = cfg.Name, cfg.Version, pkg.Root().Digest.String()
	for _, sig := range vr.Signatures {
		if !slices.Contains(res.SignedBy, sig.Key) {
			res.SignedBy = append(res.SignedBy, sig.Key)
		}
	}
	var cur v1alpha1.Package
	switch err := s.Packages.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: cfg.Name}, &cur); {
	case apierrors.IsNotFound(err):
		res.Created = true
	case meta.IsNoMatchError(err):
		return nil, refuse(http.StatusServiceUnavailable, "%v", deploy.ErrNoPackageAPI)
	case err != nil:
		return nil, refuse(http.StatusInternalServerError, "read Package %s/%s: %v", s.Namespace, cfg.Name, err)
	}
	verb := "update"
	if res.Created {
		verb = "create"
	}
	if err := s.authorize(ctx, u, verb); err != nil {
		return nil, err
	}

	// From here on, the answer is a stream of events.
	ev := newEvents(w)
	ev.send(Event{Phase: PhaseReceived, Bytes: res.Received, Message: fmt.Sprintf("%s %s, %d bytes", cfg.Name, cfg.Version, res.Received)})
	ev.send(Event{Phase: PhaseVerified, Message: "signed by " + strings.Join(res.SignedBy, ", ") + "; every blob re-hashed"})

	fail := func(err error) (*Result, error) {
		res.AgentPeakRSS = peakRSS()
		ev.send(Event{Phase: PhaseError, Error: oneLine(err.Error()), Result: res})
		return res, err
	}
	t0 = time.Now()
	ev.send(Event{Phase: PhasePushing})
	host, err := s.registry(ctx)
	if err != nil {
		return fail(err)
	}
	d := &deploy.Deploy{
		Client: s.Client, Packages: s.Packages, Namespace: s.Namespace, Registry: host,
		Verified: true, Components: opts.Components, Values: values, Timeout: opts.Timeout, NoWait: opts.NoWait,
	}
	for _, k := range res.SignedBy {
		d.KeySecrets = append(d.KeySecrets, v1alpha1.KeyReference{Kind: "Secret", Name: k, Key: deploy.KeyFile})
	}
	var waited time.Time
	d.Events = func(e deploy.Event) {
		switch e.Phase {
		case deploy.PhasePushed:
			res.Pushed, res.Took.Push = e.Pushed.BytesPushed, time.Since(t0)
			ev.send(Event{Phase: PhasePushed, Bytes: res.Pushed, Message: fmt.Sprintf("%d bytes pushed (%d images)", res.Pushed, len(e.Pushed.Images))})
		case deploy.PhaseApplied:
			what := "updated"
			if res.Created {
				what = "created"
			}
			ev.send(Event{Phase: PhaseApplied, Message: fmt.Sprintf("Package %s/%s %s for %s", s.Namespace, cfg.Name, what, u)})
			waited = time.Now()
		case deploy.PhaseCondition:
			ev.send(Event{Phase: PhaseCondition, Condition: e.Condition})
		}
	}
	dres, err := d.Run(ctx, pkg)
	if !opts.NoWait && !waited.IsZero() && dres != nil {
		res.Took.Ready = time.Since(waited)
		if c := meta.FindStatusCondition(dres.Package.Status.Conditions, v1alpha1.Ready); c != nil {
			res.Ready, res.Reason = string(c.Status), c.Reason
		}
	}
	if err != nil {
		return fail(err)
	}
	res.AgentPeakRSS = peakRSS()
	ev.send(Event{Phase: PhaseDone, Result: res})
	return res, nil
}

// authenticate checks the request's bearer token with a TokenReview.
func (s *Server) authenticate(ctx context.Context, r *http.Request) (user, error) {
	h := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return user{}, refuse(http.StatusUnauthorized, "no bearer token: send a Kubernetes token (Authorization: Bearer …)")
	}
	tr, err := s.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: strings.TrimSpace(token)},
	}, metav1.CreateOptions{})
	if err != nil {
		return user{}, refuse(http.StatusServiceUnavailable, "token review: %v", err)
	}
	if !tr.Status.Authenticated {
		why := tr.Status.Error
		if why == "" {
			why = "the API server does not know it"
		}
		return user{}, refuse(http.StatusUnauthorized, "token refused: %s", why)
	}
	return user{info: tr.Status.User}, nil
}

// authorize asks the API server whether u may do one of verbs on Packages
// in ferry's namespace.
func (s *Server) authorize(ctx context.Context, u user, verbs ...string) error {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.info.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	var why []string
	for _, verb := range verbs {
		sar, err := s.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: u.info.Username, Groups: u.info.Groups, UID: u.info.UID, Extra: extra,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: s.Namespace, Verb: verb, Group: v1alpha1.GroupVersion.Group, Resource: "packages",
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return refuse(http.StatusServiceUnavailable, "access review: %v", err)
		}
		if sar.Status.Allowed {
			return nil
		}
		if sar.Status.Reason != "" {
			why = append(why, sar.Status.Reason)
		}
	}
	msg := fmt.Sprintf("user %.64q may not %s packages.%s in namespace %s", u, strings.Join(verbs, " or "), v1alpha1.GroupVersion.Group, s.Namespace)
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return refuse(http.StatusForbidden, "%s", msg)
}

// acquire waits for an upload slot.
func (s *Server) acquire(ctx context.Context) error {
	s.once.Do(func() { s.slots = make(chan struct{}, DefaultParallel) })
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return refuse(http.StatusServiceUnavailable, "gave up waiting for an upload slot: %v", ctx.Err())
	}
}

func (s *Server) release() { <-s.slots }

// spool writes the request body to a file in s.Dir, in constant memory:
// its path and size. A stream that stalls IdleTimeout is dropped.
func (s *Server) spool(w http.ResponseWriter, r *http.Request) (string, int64, error) {
	f, err := scratch.CreateTemp(s.Dir, "ferry-upload-*.pkg")
	if err != nil {
		return "", 0, refuse(http.StatusInsufficientStorage, "spool the upload: %v", err)
	}
	path := f.Name()
	body := io.Reader(r.Body)
	if s.MaxBytes > 0 {
		body = http.MaxBytesReader(w, r.Body, s.MaxBytes)
	}
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	rc := http.NewResponseController(w)
	n, err := io.CopyBuffer(f, &deadlineReader{r: body, rc: rc, idle: idle}, make([]byte, 1<<20))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	_ = rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		if n == 0 {
			return path, 0, refuse(http.StatusBadRequest, "empty upload: send a package archive (.tar or .tar.zst) as the body")
		}
		return path, n, nil
	case errors.As(err, &tooBig):
		return path, n, refuse(http.StatusRequestEntityTooLarge, "the upload is larger than the agent takes (%d bytes)", s.MaxBytes)
	case errors.Is(err, syscall.ENOSPC):
		return path, n, refuse(http.StatusInsufficientStorage, "no room on the agent's disk for the upload after %d bytes", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return path, n, refuse(http.StatusRequestTimeout, "the upload stalled for %s after %d bytes", idle, n)
	}
	return path, n, refuse(http.StatusBadRequest, "the upload broke off after %d bytes: %v", n, err)
}

// deadlineReader pushes the connection's read deadline idle ahead of each
// read: an upload may take as long as it needs, but may not stall.
type deadlineReader struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	_ = d.rc.SetReadDeadline(time.Now().Add(d.idle))
	return d.r.Read(p)
}

// trustedKeys are the public keys the cluster trusts (deploy.TrustedKeys).
func (s *Server) trustedKeys(ctx context.Context) ([]artifact.Verifier, error) {
	keys, err := deploy.TrustedKeys(ctx, s.Client, s.Namespace)
	switch {
	case errors.Is(err, deploy.ErrNoTrustedKey):
		return nil, refuse(http.StatusUnprocessableEntity, "%v", err)
	case err != nil:
		return nil, refuse(http.StatusServiceUnavailable, "%v", err)
	}
	return keys, nil
}

// registry is where the agent reaches the in-cluster registry.
func (s *Server) registry(ctx context.Context) (string, error) {
	if s.Registry != "" {
		return s.Registry, nil
	}
	host, err := kube.ServiceHost(ctx, s.Client, s.Namespace, cluster.RegistryName)
	if err != nil {
		return "", fmt.Errorf("the registry: %w", err)
	}
	return host, nil
}

// events writes the response stream.
type events struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newEvents(w http.ResponseWriter) *events {
	rc := http.NewResponseController(w)
	// The wait for Ready may be long; the server's write timeout is for
	// its short answers.
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", MediaTypeEvents)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	return &events{w: w, rc: rc}
}

func (e *events) send(ev Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	_, _ = e.w.Write(append(b, '\n'))
	_ = e.rc.Flush()
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// peakRSS is this process's peak resident memory (VmHWM), in bytes.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
