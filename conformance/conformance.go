// Package conformance checks that a registry speaks the OCI distribution
// spec v1.1 (https://github.com/opencontainers/distribution-spec/blob/v1.1.0/spec.md).
// The checks are written from the spec and grouped by its four workflow
// categories: pull, push, content discovery and content management. Each
// check names the spec section and endpoint ID (end-N) it tests.
//
// Run works against any registry URL, with optional credentials (HTTP basic,
// or bearer tokens obtained with them), and selects workflows or single
// checks, so the same suite proves ferry's embedded registry, compares it with
// other registries and tells a user whether their registry can hold ferry
// packages (see Profile).
package conformance

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/internal/redact"
)

// Workflow is one of the spec's workflow categories.
type Workflow string

// The spec's four workflow categories, in the order Run runs them.
const (
	Pull       Workflow = "pull"
	Push       Workflow = "push"
	Discovery  Workflow = "discovery"
	Management Workflow = "management"
)

// Workflows lists every workflow in run order.
var Workflows = []Workflow{Pull, Push, Discovery, Management}

// ParseWorkflow accepts a workflow name ("pull", "push", "discovery",
// "management"; "content-discovery" and "content-management" too).
func ParseWorkflow(s string) (Workflow, error) {
	s = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "content-")
	for _, w := range Workflows {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("unknown workflow %q (want pull, push, discovery or management)", s)
}

// DefaultRepo is the repository prefix Run writes under when Config.Repo is
// empty.
const DefaultRepo = "ferry-conformance"

// maxBodySlack is how much larger than the large blob a response body
// may be (16 MiB: manifests and lists are far smaller).
const maxBodySlack = 16 << 20

// DefaultLargeBlobSize is the size of the large-blob upload when
// Config.LargeBlobSize is 0.
const DefaultLargeBlobSize = 32 << 20

// Config says which registry to check and how.
type Config struct {
	// URL is the registry's base URL, e.g. "http://127.0.0.1:5000". A bare
	// host[:port] means https.
	URL string
	// Repo is the repository prefix. Each run writes under
	// <Repo>/<run id>/..., so runs never see each other's tags. With
	// ReadOnly, Repo is the repository holding the pull fixture.
	// DefaultRepo if empty.
	Repo string
	// Username and Password, when set, answer basic-auth challenges and
	// obtain bearer tokens.
	Username, Password string
	// Workflows selects workflows; all when empty.
	Workflows []Workflow
	// Checks, when not empty, selects checks by ID (e.g.
	// "push/blob-chunked"); it narrows Workflows further.
	Checks []string
	// ReadOnly checks a registry that cannot be written to (such as ferry's
	// in-cluster injector): the pull workflow reads the content that
	// WritePullFixture stored under Repo, and the other workflows are
	// skipped.
	ReadOnly bool
	// InsecureSkipVerify disables TLS certificate verification.
	InsecureSkipVerify bool
	// Client is the HTTP client; a client with a 2-minute timeout if nil.
	Client *http.Client
	// LargeBlobSize is the size of the large-blob check's blob;
	// DefaultLargeBlobSize if 0, and the check is skipped if negative.
	LargeBlobSize int64
}

// Status is the outcome of one check.
type Status string

// Outcomes of a check.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Check describes one conformance check.
type Check struct {
	// ID is "<workflow>/<name>", stable across versions.
	ID       string   `json:"id"`
	Workflow Workflow `json:"workflow"`
	// Spec is the spec section (and endpoint ID) the check tests.
	Spec string `json:"spec"`
	// Title says what is checked, in one line.
	Title string `json:"title"`
}

// Result is the outcome of one check.
type Result struct {
	Check
	Status Status `json:"status"`
	// Detail says why a check failed or was skipped, or notes a
	// spec-permitted variation on a pass.
	Detail   string        `json:"detail,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Report is the outcome of a Run.
type Report struct {
	// URL is the registry checked, its credentials masked.
	URL     string    `json:"url"`
	Repo    string    `json:"repo"`
	Results []Result  `json:"results"`
	Started time.Time `json:"started"`
}

// Counts tallies results by status.
type Counts struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

func (c *Counts) add(s Status) {
	switch s {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	default:
		c.Skipped++
	}
}

// Total counts every status.
func (r Report) Total() Counts {
	var c Counts
	for _, res := range r.Results {
		c.add(res.Status)
	}
	return c
}

// ByWorkflow tallies results per workflow.
func (r Report) ByWorkflow() map[Workflow]Counts {
	m := map[Workflow]Counts{}
	for _, res := range r.Results {
		c := m[res.Workflow]
		c.add(res.Status)
		m[res.Workflow] = c
	}
	return m
}

// Failures returns the failed results.
func (r Report) Failures() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Status == Failed {
			out = append(out, res)
		}
	}
	return out
}

// Checks lists every check in run order.
func Checks() []Check {
	out := make([]Check, 0, len(catalog))
	for _, c := range catalog {
		out = append(out, c.Check)
	}
	return out
}

// Profile is the set of check IDs that a registry must pass to hold and serve
// ferry packages: image indexes with an artifactType, custom config media
// types, chunked uploads, cross-repository mounts, and referrers through the
// API or the tag-schema fallback.
var Profile = []string{
	"pull/api-version",
	"pull/manifest-by-tag",
	"pull/manifest-by-digest",
	"pull/blob-get",
	"pull/blob-range",
	"push/blob-post-put",
	"push/blob-chunked",
	"push/blob-mount",
	"push/manifest-custom-config",
	"push/manifest-artifact-type",
	"push/index-artifact-type",
	"discovery/referrers-or-tag-schema",
	"discovery/tags-list",
}

// errSkip marks a check as skipped rather than failed.
type skipError struct{ reason string }

func (e skipError) Error() string { return e.reason }

func skipf(format string, args ...any) error { return skipError{fmt.Sprintf(format, args...)} }

// note is returned by a passing check that wants to say something, such as
// a spec-permitted variation.
type noteError struct{ note string }

func (e noteError) Error() string { return e.note }

func passNote(format string, args ...any) error { return noteError{fmt.Sprintf(format, args...)} }

type check struct {
	Check
	run func(ctx context.Context, e *env) error
}

func def(w Workflow, name, spec, title string, run func(context.Context, *env) error) check {
	return check{Check{ID: string(w) + "/" + name, Workflow: w, Spec: spec, Title: title}, run}
}

// catalog is every check, in run order; it is assembled in init so checks
// can refer to helpers in other files.
var catalog []check

func init() {
	catalog = slices.Concat(pullChecks, pushChecks, malformedChecks, discoveryChecks, catalogChecks, managementChecks)
}

// Run runs the selected checks against cfg.URL and reports each outcome. It
// returns an error only for an unusable Config; registry misbehaviour is
// reported in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	base, err := parseBase(cfg.URL)
	if err != nil {
		return Report{}, err
	}
	for _, id := range cfg.Checks {
		if !slices.ContainsFunc(catalog, func(c check) bool { return c.ID == id }) {
			return Report{}, fmt.Errorf("unknown check %q", id)
		}
	}
	repo := cfg.Repo
	if repo == "" {
		repo = DefaultRepo
	}
	hc := cfg.Client
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if cfg.InsecureSkipVerify {
			tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by the user
		}
		hc = &http.Client{Timeout: 2 * time.Minute, Transport: tr}
	}
	// Never follow redirects: Location headers are what we check.
	hcCopy := *hc
	hcCopy.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	runID := make([]byte, 4)
	_, _ = rand.Read(runID)
	e := &env{
		cfg:    cfg,
		c:      &client{base: base, hc: &hcCopy, user: cfg.Username, pass: cfg.Password, tokens: map[string]string{}},
		runID:  hex.EncodeToString(runID),
		prefix: repo,
	}
	if !cfg.ReadOnly {
		e.prefix = repo + "/" + e.runID
	}
	largeSize := cfg.LargeBlobSize
	if largeSize == 0 {
		largeSize = DefaultLargeBlobSize
	}
	e.largeSize = largeSize
	// The largest body a check reads back is the large blob's.
	e.c.maxBody = max(largeSize, 0) + maxBodySlack

	report := Report{URL: redact.URL(base.String()), Repo: e.prefix, Started: time.Now()}
	for _, c := range catalog {
		if len(cfg.Workflows) > 0 && !slices.Contains(cfg.Workflows, c.Workflow) {
			continue
		}
		if len(cfg.Checks) > 0 && !slices.Contains(cfg.Checks, c.ID) {
			continue
		}
		res := Result{Check: c.Check}
		start := time.Now()
		var err error
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case cfg.ReadOnly && c.Workflow != Pull:
			err = skipf("registry is read-only")
		default:
			err = c.run(ctx, e)
		}
		res.Duration = time.Since(start)
		var skip skipError
		var note noteError
		switch {
		case err == nil:
			res.Status = Passed
		case errors.As(err, &note):
			res.Status, res.Detail = Passed, note.note
		case errors.As(err, &skip):
			res.Status, res.Detail = Skipped, skip.reason
		default:
			res.Status, res.Detail = Failed, strings.Join(strings.Fields(err.Error()), " ")
		}
		report.Results = append(report.Results, res)
	}
	return report, nil
}

func parseBase(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("conformance: registry URL is empty")
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	// Not url.Parse's error: it quotes the URL whole, a password included.
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("conformance: registry URL %q: want http(s)://host[:port]", redact.URL(raw))
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}
