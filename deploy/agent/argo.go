package agent

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/distribution/reference"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/redact"
)

// maxGeneratorDepth bounds how deep ApplicationSet generators are walked
// (matrix and merge generators nest; Argo CD allows two levels).
const maxGeneratorDepth = 3

// application rewrites the sources of an Argo CD Application's spec (or
// of an ApplicationSet's template spec, templated values left alone).
func (s *SourceRewriter) application(spec map[string]any, res *Result) error {
	for _, src := range appSources(spec) {
		var err error
		if _, isChart := src["chart"]; isChart {
			err = s.argoChart(src, res)
		} else {
			err = s.argoGit(src, "repoURL", "targetRevision", res)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applicationSet rewrites an ApplicationSet: the literal sources of its
// template, and the git generators (also inside matrix and merge ones),
// which Argo CD's ApplicationSet controller clones itself. Rewriting the
// template, not only the Applications it makes, keeps the controller from
// putting the original URLs back into them.
func (s *SourceRewriter) applicationSet(spec map[string]any, res *Result) error {
	if tmpl, ok := spec["template"].(map[string]any); ok {
		if tspec, ok := tmpl["spec"].(map[string]any); ok {
			if err := s.application(tspec, res); err != nil {
				return fmt.Errorf("template: %w", err)
			}
		}
	}
	return s.generators(spec["generators"], 0, res)
}

func (s *SourceRewriter) generators(v any, depth int, res *Result) error {
	list, _ := v.([]any)
	if depth >= maxGeneratorDepth {
		return nil
	}
	for _, g := range list {
		gen, _ := g.(map[string]any)
		if git, ok := gen["git"].(map[string]any); ok {
			if err := s.argoGit(git, "repoURL", "revision", res); err != nil {
				return fmt.Errorf("git generator: %w", err)
			}
		}
		for _, nest := range []string{"matrix", "merge"} {
			if n, ok := gen[nest].(map[string]any); ok {
				if err := s.generators(n["generators"], depth+1, res); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// appProject lets an Argo CD AppProject that lists carried repositories
// in spec.sourceRepos use their in-cluster copies: beside each git
// repository a package carries, and each OCI Helm repository below which
// it carries charts, the in-cluster URL the agent rewrites sources to is
// added; the originals stay. Patterns other than exact URLs are left
// alone.
func (s *SourceRewriter) appProject(spec map[string]any, res *Result) error {
	list, _ := spec["sourceRepos"].([]any)
	have := map[string]bool{}
	for _, v := range list {
		if u, ok := v.(string); ok {
			have[u] = true
		}
	}
	out := list
	add := func(u string) {
		if !have[u] {
			have[u] = true
			out = append(out, u)
			res.Changed = true
		}
	}
	for _, v := range list {
		u, _ := v.(string)
		if strings.ContainsAny(u, "*?[{!") {
			continue
		}
		if g, ok := s.carried(u); ok {
			add(s.gitURL(g))
		} else if path, ok := s.chartRepository(u); ok {
			add(s.Registry + "/" + path)
		}
	}
	if res.Changed {
		spec["sourceRepos"] = out
	}
	return nil
}

// chartRepository finds the path in the registry of an OCI Helm
// repository u (with or without its scheme) below which a package carries
// an image (a chart).
func (s *SourceRewriter) chartRepository(u string) (string, bool) {
	if s.Registry == "" {
		return "", false
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(u, "oci://"), "/")
	if !strings.Contains(rest, "/") || strings.HasPrefix(rest, s.Registry+"/") {
		return "", false
	}
	// A name below it, as a chart's would be (a Docker Hub repository
	// of one component alone would be read as library/<it>).
	named, err := reference.ParseNormalizedNamed(rest + "/chart")
	if err != nil {
		return "", false
	}
	path, ok := s.index().below[strings.TrimSuffix(hubName(named), "chart")]
	return path, ok
}

// appSources lists an Application spec's source and each of its sources.
func appSources(spec map[string]any) []map[string]any {
	var out []map[string]any
	if src, ok := spec["source"].(map[string]any); ok {
		out = append(out, src)
	}
	if list, ok := spec["sources"].([]any); ok {
		for _, v := range list {
			if src, ok := v.(map[string]any); ok {
				out = append(out, src)
			}
		}
	}
	return out
}

// templated says v is an ApplicationSet template expression, decided per
// generated Application: left alone.
func templated(v string) bool { return strings.Contains(v, "{{") }

// fullCommit matches a 40-hex commit.
var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// argoGit points a git source (an Application source, or an ApplicationSet
// git generator: the fields urlKey and revKey) that names a carried
// repository at the git server. Its revision becomes the carried ref
// (short: main, v1.2), which the git server moves when a package carries
// the repository at a new commit, so a new package version is synced
// without the object being changed; HEAD when the package carries a bare
// commit. A revision naming the carried commit stays pinned to it. On an
// already rewritten URL, a commit the package no longer carries (a pin of
// an older version) becomes the moving ref too.
func (s *SourceRewriter) argoGit(src map[string]any, urlKey, revKey string, res *Result) error {
	u, _ := src[urlKey].(string)
	if templated(u) {
		return nil
	}
	g, ok := s.carried(u)
	rewritten := false
	if !ok {
		if g, ok = s.inCluster(u); !ok {
			return nil
		}
		rewritten = true
	}
	rev, _ := src[revKey].(string)
	switch {
	case templated(rev):
	case rev == g.Commit:
	case rewritten && fullCommit.MatchString(rev):
		src[revKey] = movingRevision(g)
	default:
		short := strings.TrimPrefix(strings.TrimPrefix(g.Ref, "refs/heads/"), "refs/tags/")
		if !slices.Contains([]string{"", "HEAD", g.Ref, short}, rev) {
			return fmt.Errorf("Application source %s: targetRevision %.64q %w: it carries %s", redact.URL(u), rev, ErrSourceRef, g.Revision)
		}
		src[revKey] = movingRevision(g)
	}
	src[urlKey] = s.gitURL(g)
	res.Changed = true
	res.addSecret(s.ArgoSecret)
	return nil
}

// movingRevision is what a rewritten Argo CD git source follows: the
// carried ref's short name, or HEAD for a bare commit.
func movingRevision(g artifact.Repository) string {
	if g.Ref == "" {
		return "HEAD"
	}
	return strings.TrimPrefix(strings.TrimPrefix(g.Ref, "refs/heads/"), "refs/tags/")
}

// exactVersion matches a chart version that names one version (1.2.3,
// v1.2.3-rc.1+build), not a range (^1.2, 1.x, >=1.0 <2.0).
var exactVersion = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+){0,2}([-+][0-9A-Za-z.+-]+)?$`)

// argoChart points a Helm chart source at the in-cluster registry when a
// package carries that chart as an OCI artifact under images: at
// <repository>/<chart>:<version>, where repository is the source's
// repoURL without its scheme (oci://, https:// or none, as Argo CD writes
// OCI Helm repositories). The repoURL becomes <registry>/<path>, as Argo
// CD names an OCI Helm repository, and the source needs an Argo CD
// repository Secret for it (Result.HelmRepositories). An exact version
// the packages do not carry is refused, naming those they do; a range is
// resolved by Argo CD against the carried tags.
func (s *SourceRewriter) argoChart(src map[string]any, res *Result) error {
	u, _ := src["repoURL"].(string)
	chart, _ := src["chart"].(string)
	if s.Registry == "" || chart == "" || templated(u) || templated(chart) {
		return nil
	}
	path, tags := s.chartTags(u, chart)
	if tags == nil {
		return nil
	}
	rev, _ := src["targetRevision"].(string)
	if exactVersion.MatchString(rev) && !slices.Contains(tags, strings.ReplaceAll(rev, "+", "_")) {
		slices.Sort(tags)
		return fmt.Errorf("Application source %s chart %s: targetRevision %.64q %w: it carries %s", redact.URL(u), chart, rev, ErrSourceRef, strings.Join(tags, ", "))
	}
	repo := s.Registry + "/" + path
	src["repoURL"] = repo
	res.Changed = true
	if !slices.Contains(res.HelmRepositories, repo) {
		res.HelmRepositories = append(res.HelmRepositories, repo)
	}
	return nil
}

// chartTags finds chart below the Helm repository u in the carried
// images: its repository's path in the registry (without the chart) and
// the tags carried; nil tags when none is carried.
func (s *SourceRewriter) chartTags(u, chart string) (string, []string) {
	rest := u
	for _, scheme := range []string{"oci://", "https://", "http://"} {
		rest = strings.TrimPrefix(rest, scheme)
	}
	rest = strings.TrimSuffix(rest, "/")
	// Already rewritten: <registry>/<path>; compare registry paths.
	if p, ok := strings.CutPrefix(rest, s.Registry+"/"); ok {
		return p, slices.Clone(s.index().byPath[p+"/"+chart])
	}
	host, p, _ := strings.Cut(rest, "/")
	named, err := reference.ParseNormalizedNamed(host + "/" + p + "/" + chart)
	if err != nil || p == "" {
		return "", nil
	}
	path := strings.TrimSuffix(reference.Path(named), "/"+chart)
	return path, slices.Clone(s.index().byName[hubName(named)])
}

// hubName is a repository's name with Docker Hub's other host names
// (registry-1.docker.io, as Helm charts name it) as docker.io.
func hubName(n reference.Named) string {
	d := reference.Domain(n)
	if d == "registry-1.docker.io" || d == "index.docker.io" {
		return "docker.io/" + reference.Path(n)
	}
	return n.Name()
}

// chartIndex indexes the carried images for chart lookups, so that an
// object with many sources costs one pass over the images.
type chartIndex struct {
	byName map[string][]string // hubName → tags ("" for by digest only)
	byPath map[string][]string // path in the registry → tags
	below  map[string]string   // hubName prefix ("ghcr.io/org/") → its path in the registry
}

// index builds the chart index on first use (Images do not change once a
// SourceRewriter is in use).
func (s *SourceRewriter) index() *chartIndex {
	s.chartsOnce.Do(func() {
		ix := &chartIndex{byName: map[string][]string{}, byPath: map[string][]string{}, below: map[string]string{}}
		for key := range s.Images {
			named, err := reference.ParseNormalizedNamed(key)
			if err != nil {
				continue
			}
			tag := ""
			if t, ok := named.(reference.Tagged); ok {
				tag = t.Tag()
			}
			name, path := hubName(named), reference.Path(named)
			ix.byName[name] = append(ix.byName[name], tag)
			ix.byPath[path] = append(ix.byPath[path], tag)
			for i := strings.LastIndex(path, "/"); i > 0; i = strings.LastIndex(path[:i], "/") {
				ix.below[strings.TrimSuffix(name, path[i:])+"/"] = path[:i]
			}
		}
		s.charts = ix
	})
	return s.charts
}
