package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/deploy/upload"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// registryView is the in-cluster registry: how it is reached, its
// repositories and their tags, and (on demand) its storage and what a
// garbage collection would free.
type registryView struct {
	view
	Way          string
	Repositories []repositoryView
	Truncated    bool
	Error        string
	Usage        *rollout.Usage
	UsageError   string
}

type repositoryView struct {
	Name string
	Tags []string
	More bool
}

// Bounds of the registry page.
const (
	maxRepositories = 500
	maxTags         = 20
)

func (s *Server) registryPage(w http.ResponseWriter, r *http.Request) {
	s.registryView(w, r, nil, "")
}

// registryUsage measures the registry's storage and what GC would free
// (an exec in a registry Pod: a POST, with the CSRF token).
func (s *Server) registryUsage(w http.ResponseWriter, r *http.Request) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	u, err := rollout.RegistryUsage(r.Context(), a.cs, a.cfg, s.opts.Namespace)
	if err != nil {
		s.registryView(w, r, nil, "measure the storage: "+oneLine(err.Error()))
		return
	}
	s.registryView(w, r, &u, "")
}

func (s *Server) registryView(w http.ResponseWriter, r *http.Request, usage *rollout.Usage, usageErr string) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	v := &registryView{view: s.view(r, "Registry"), Usage: usage, UsageError: usageErr}
	if err := s.repositories(r.Context(), a, v); err != nil {
		v.Error = oneLine(err.Error())
	}
	s.render(w, r, "registry", v)
}

func (s *Server) repositories(ctx context.Context, a *actor, v *registryView) error {
	reg, ep, err := a.registry(ctx, s.opts.Namespace)
	if err != nil {
		return err
	}
	v.Way = ep.String()
	var names []string
	err = artifact.ListRepositories(ctx, reg, func(repos []string) error {
		names = append(names, repos...)
		if len(names) >= maxRepositories {
			return errStop
		}
		return nil
	})
	if errors.Is(err, artifact.ErrListLimit) {
		return err // names the registry
	}
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("list the repositories: %w", err)
	}
	if len(names) > maxRepositories {
		names, v.Truncated = names[:maxRepositories], true
	}
	slices.Sort(names)
	for _, name := range names {
		rv := repositoryView{Name: name}
		repo, err := reg.Repository(ctx, name)
		if err != nil {
			return err
		}
		err = artifact.ListTags(ctx, repo, func(tags []string) error {
			rv.Tags = append(rv.Tags, tags...)
			if len(rv.Tags) > maxTags {
				return errStop
			}
			return nil
		})
		if errors.Is(err, artifact.ErrListLimit) {
			return err // names the repository
		}
		if err != nil && !errors.Is(err, errStop) {
			return fmt.Errorf("tags of %s: %w", name, err)
		}
		if len(rv.Tags) > maxTags {
			rv.Tags, rv.More = rv.Tags[:maxTags], true
		}
		v.Repositories = append(v.Repositories, rv)
	}
	return nil
}

var errStop = errors.New("enough")

// uploadView is the upload page, with an inspection when one was asked
// for by path.
type uploadView struct {
	view
	AllowPaths bool
	Path       string
	Inspect    *inspection
}

func (s *Server) uploadPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.cluster(r); !ok {
		s.refuse(w, r, http.StatusNotFound, fmt.Sprintf("no cluster %.64q", r.PathValue("cluster")))
		return
	}
	s.render(w, r, "upload", &uploadView{view: s.view(r, "Upload"), AllowPaths: s.opts.AllowPaths})
}

// upload relays the request body, a package archive, to the cluster's
// agent (ferry deploy --via-agent's endpoint) with the actor's token, and
// the agent's events back to the browser as they come, one JSON object a
// line. A refusal before the events is answered with the agent's status
// and one line.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	q.Del("csrf")
	opts, err := upload.ParseOptions(q)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	cli, err := upload.Connect(ctx, a.cfg, a.cs, s.opts.Namespace)
	if err != nil {
		s.fail(w, r, fmt.Errorf("reach the agent: %w", err))
		return
	}
	defer cli.Close()
	rc := http.NewResponseController(w)
	started, last := false, ""
	res, err := cli.Upload(ctx, r.Body, opts, func(ev upload.Event) {
		if !started {
			started = true
			_ = rc.SetWriteDeadline(time.Time{})
			w.Header().Set("Content-Type", upload.MediaTypeEvents)
			w.WriteHeader(http.StatusOK)
		}
		last = ev.Phase
		b, _ := json.Marshal(ev)
		_, _ = w.Write(append(b, '\n'))
		_ = rc.Flush()
	})
	var refused *upload.Refused
	switch {
	case err == nil:
		s.log.Info("dashboard upload", "cluster", a.cluster, "user", sessionOf(r).user, "package", res.Name, "digest", res.Digest, "ready", res.Ready)
	case !started && errors.As(err, &refused):
		s.refuse(w, r, refused.Status, refused.Message)
	case !started && errors.Is(err, upload.ErrNoToken):
		s.refuse(w, r, http.StatusUnauthorized, err.Error())
	case !started:
		s.refuse(w, r, http.StatusBadGateway, err.Error())
	case last != upload.PhaseError:
		b, _ := json.Marshal(upload.Event{Phase: upload.PhaseError, Error: oneLine(err.Error())})
		_, _ = w.Write(append(b, '\n'))
	}
}

// inspection is what the dashboard found in an archive: its report, and
// whether the cluster's trusted keys verify it (or why not).
type inspection struct {
	Name     string
	Report   *artifact.Report
	Verified bool
	SignedBy []string
	Error    string
}

// inspect opens an archive, the request's body (or, with AllowPaths, a
// path on this machine, from a form), reads it whole, every blob
// re-hashed, and verifies it against the keys the cluster trusts: before
// an upload, the user sees what they would send and whether the cluster
// would take it. Nothing is sent to the cluster but the read of its keys.
func (s *Server) inspect(w http.ResponseWriter, r *http.Request) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		path := strings.TrimSpace(r.PostFormValue("path"))
		v := &uploadView{view: s.view(r, "Upload"), AllowPaths: s.opts.AllowPaths, Path: path}
		switch {
		case !s.opts.AllowPaths:
			s.refuse(w, r, http.StatusForbidden, "this dashboard opens no paths: pick the file instead")
			return
		case path == "":
			v.Inspect = &inspection{Error: "name an archive (.tar or .tar.zst)"}
		default:
			v.Inspect = s.inspectFile(ctx, a, path, path)
			v.Inspect.Name = filepath.Base(path)
		}
		s.render(w, r, "upload", v)
		return
	}
	f, err := scratch.CreateTemp("", "ferry-dashboard-*.pkg")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer os.Remove(f.Name())
	name := filepath.Base(r.URL.Query().Get("name"))
	if name == "." || name == "/" || len(name) > 255 {
		name = "the uploaded archive"
	}
	n, err := io.CopyBuffer(f, r.Body, make([]byte, 1<<20))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var in *inspection
	switch {
	case err != nil:
		in = &inspection{Error: "the archive broke off after " + humanBytes(n) + ": " + oneLine(err.Error())}
	case n == 0:
		in = &inspection{Error: "empty: pick a package archive (.tar or .tar.zst)"}
	default:
		in = s.inspectFile(ctx, a, f.Name(), name)
	}
	in.Name = r.URL.Query().Get("name")
	var buf strings.Builder
	if err := s.pages["upload"].ExecuteTemplate(&buf, "inspection", in); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, buf.String())
}

// inspectFile inspects the archive at path, which messages call name.
func (s *Server) inspectFile(ctx context.Context, a *actor, path, name string) *inspection {
	in := &inspection{}
	pkg, err := artifact.OpenAs(ctx, path, name)
	if err != nil {
		in.Error = "not a ferry package: " + oneLine(err.Error())
		return in
	}
	if in.Report, err = artifact.Inspect(ctx, pkg, "", nil); err != nil {
		in.Error = oneLine(err.Error())
		return in
	}
	keys, err := deploy.TrustedKeys(ctx, a.cs, s.opts.Namespace)
	if err != nil {
		in.Error = "the cluster's keys: " + oneLine(err.Error())
		return in
	}
	vr, err := artifact.Verify(ctx, pkg, "", artifact.VerifyOptions{Keys: keys})
	if err != nil {
		in.Error = "the cluster would refuse it: " + oneLine(err.Error())
		return in
	}
	in.Verified = true
	for _, sig := range vr.Signatures {
		if !slices.Contains(in.SignedBy, sig.Key) {
			in.SignedBy = append(in.SignedBy, sig.Key)
		}
	}
	return in
}
