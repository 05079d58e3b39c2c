package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/distribution/reference"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
)

// ErrSourceRef means a GitOps source names a revision of a carried
// repository other than the one its package carries.
var ErrSourceRef = errors.New("names a revision the package does not carry")

// Repositories maps the keys of carried git repositories (gitrepo.Key:
// host/path) to what deployed packages recorded for them.
type Repositories map[string]artifact.Repository

// Add records every git repository of a package's config; a repository
// carried by several packages keeps the last one added.
func (m Repositories) Add(cfg *artifact.Config) {
	for _, c := range cfg.Components {
		for _, g := range c.Repositories {
			m[g.Key] = g
		}
	}
}

// SourceRewriter points GitOps sources that name a carried git repository
// at the copies in the cluster: Flux GitRepository objects and Argo CD
// git sources (of Applications, ApplicationSet templates and git
// generators) at the in-cluster git server, following the carried ref,
// which the server moves to each package version's commit; Flux
// OCIRepository objects at the artifact in the in-cluster registry (by
// digest). A source that names another revision of a carried repository
// is refused: nothing is resolved in the cluster but what a package
// carries. Flux HelmRepository objects of type oci, and Argo CD Helm chart
// sources, whose repository holds carried OCI artifacts (charts carried as
// images, e.g. ghcr.io/org/charts/web:1.0.0 under oci://ghcr.io/org/charts)
// are pointed at the same path in the in-cluster registry, where the
// packages' push tagged them as they were tagged. Sources of repositories
// no package carries, and ApplicationSet template expressions ({{...}}),
// pass unchanged.
type SourceRewriter struct {
	// GitBase is the in-cluster git server's base URL, e.g.
	// http://10.96.0.40; repositories are at GitBase/<key>.git.
	GitBase string
	// Registry is the in-cluster registry as Pods reach it, e.g.
	// 10.96.0.20:5000 (plain HTTP).
	Registry string
	// GitSecret is the Secret (username, password) Flux uses for the git
	// server, ArgoSecret the Argo CD repo-creds Secret for it; PullSecret
	// the dockerconfigjson Secret for the registry at Registry (Flux looks
	// credentials up by the host it pulls from: not the Pods' pull secret,
	// which names the nodes' address of the registry).
	GitSecret, ArgoSecret, PullSecret string
	// Repositories are the carried repositories.
	Repositories Repositories
	// Images are the carried images (and OCI artifacts such as charts),
	// for HelmRepository objects and Argo CD chart sources.
	Images Images

	chartsOnce sync.Once
	charts     *chartIndex
}

// Result is what Rewrite did to a source and what the source now needs
// in its namespace.
type Result struct {
	// Changed says the object was changed.
	Changed bool
	// Secrets are the names of ferry's Secrets (GitSecret, ArgoSecret,
	// PullSecret) the object now names, to copy into its namespace.
	Secrets []string
	// HelmRepositories are the in-cluster registry's OCI Helm
	// repositories (<registry>/<path>, no scheme) an Argo CD object now
	// names: each needs an Argo CD repository Secret (see
	// HelmRepositories.Ensure).
	HelmRepositories []string
}

func (r *Result) addSecret(name string) {
	if !slices.Contains(r.Secrets, name) {
		r.Secrets = append(r.Secrets, name)
	}
}

// Rewrite changes obj (a decoded GitRepository, OCIRepository,
// HelmRepository, Application, ApplicationSet or AppProject) in place to use the
// carried copies, and says what it did.
func (s *SourceRewriter) Rewrite(kind string, obj map[string]any) (Result, error) {
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return Result{}, nil
	}
	var (
		res Result
		err error
	)
	switch kind {
	case "GitRepository":
		err = s.gitRepository(spec, &res)
	case "OCIRepository":
		err = s.ociRepository(spec, &res)
	case "HelmRepository":
		err = s.helmRepository(spec, &res)
	case "Application":
		err = s.application(spec, &res)
	case "AppProject":
		err = s.appProject(spec, &res)
	case "ApplicationSet":
		err = s.applicationSet(spec, &res)
		if err != nil {
			err = fmt.Errorf("ApplicationSet %w", err)
		}
	}
	if err != nil || !res.Changed {
		return Result{}, err
	}
	return res, nil
}

// carried finds the repository a URL names, and whether it already points
// at the in-cluster copy.
func (s *SourceRewriter) carried(u string) (artifact.Repository, bool) {
	g, ok := s.Repositories[gitrepo.Key(u)]
	return g, ok
}

// gitURL is where the git server serves g.
func (s *SourceRewriter) gitURL(g artifact.Repository) string {
	return strings.TrimSuffix(s.GitBase, "/") + "/" + g.Key + ".git"
}

// inCluster finds the carried repository an already rewritten git URL
// names (the rewrite is idempotent).
func (s *SourceRewriter) inCluster(u string) (artifact.Repository, bool) {
	base := strings.TrimSuffix(s.GitBase, "/") + "/"
	if s.GitBase == "" || !strings.HasPrefix(u, base) {
		return artifact.Repository{}, false
	}
	g, ok := s.Repositories[strings.TrimSuffix(strings.TrimPrefix(u, base), ".git")]
	return g, ok
}

// gitRepository points a Flux GitRepository at the git server. Its ref
// becomes the carried branch or tag, which the git server moves when a
// package carries the repository at a new commit (source-controller
// fetches it at the next interval); a commit it names (the carried one)
// stays, and a bare commit carried is pinned. On an already rewritten
// URL, a commit the package no longer carries (a pin of an older version)
// is dropped.
func (s *SourceRewriter) gitRepository(spec map[string]any, res *Result) error {
	u, _ := spec["url"].(string)
	g, ok := s.carried(u)
	rewritten := false
	if !ok {
		if g, ok = s.inCluster(u); !ok {
			return nil
		}
		rewritten = true
	}
	ref, _ := spec["ref"].(map[string]any)
	if c, _ := ref["commit"].(string); rewritten && c != g.Commit {
		delete(ref, "commit")
	}
	if err := checkFluxRef(g, ref); err != nil {
		return fmt.Errorf("GitRepository %s: %w", u, err)
	}
	want := map[string]any{}
	if b, ok := strings.CutPrefix(g.Ref, "refs/heads/"); ok {
		want["branch"] = b
	} else if t, ok := strings.CutPrefix(g.Ref, "refs/tags/"); ok {
		want["tag"] = t
	}
	if c, _ := ref["commit"].(string); c != "" || len(want) == 0 {
		want["commit"] = g.Commit
	}
	spec["url"], spec["ref"] = s.gitURL(g), want
	spec["secretRef"] = map[string]any{"name": s.GitSecret}
	delete(spec, "provider")
	res.Changed = true
	res.addSecret(s.GitSecret)
	return nil
}

// checkFluxRef accepts a Flux source ref that names nothing, or the
// carried branch, tag, or commit.
func checkFluxRef(g artifact.Repository, ref map[string]any) error {
	for k, v := range ref {
		val, _ := v.(string)
		if val == "" {
			continue
		}
		ok := false
		switch k {
		case "branch":
			ok = g.Ref == "refs/heads/"+val
		case "tag":
			ok = g.Ref == "refs/tags/"+val
		case "name":
			ok = g.Ref == val || g.Ref == "refs/heads/"+val || g.Ref == "refs/tags/"+val
		case "commit":
			ok = g.Commit == val
		case "digest":
			ok = g.Digest.String() == val
		}
		if !ok {
			return fmt.Errorf("ref %s %.64q %w: it carries %s (digest %s)", k, val, ErrSourceRef, g.Revision, g.Digest)
		}
	}
	return nil
}

func (s *SourceRewriter) ociRepository(spec map[string]any, res *Result) error {
	u, _ := spec["url"].(string)
	rest, isOCI := strings.CutPrefix(u, "oci://")
	if !isOCI {
		return nil
	}
	g, ok := s.carried(rest)
	if !ok {
		// Already rewritten: oci://<registry>/<path>, pinned by digest.
		for _, c := range s.Repositories {
			if rest == s.Registry+"/"+c.Path {
				g, ok = c, true
				break
			}
		}
		if !ok {
			return nil
		}
	}
	ref, _ := spec["ref"].(map[string]any)
	if err := checkFluxRef(g, ref); err != nil {
		return fmt.Errorf("OCIRepository %s: %w", u, err)
	}
	spec["ref"] = map[string]any{"digest": g.Digest.String()}
	s.toRegistry(spec, g.Path, res)
	return nil
}

// toRegistry points a Flux OCI source's spec at path in the in-cluster
// registry: plain HTTP, no cloud provider's login, the registry's Secret.
func (s *SourceRewriter) toRegistry(spec map[string]any, path string, res *Result) {
	spec["url"] = "oci://" + s.Registry + "/" + path
	spec["insecure"] = true
	spec["provider"] = "generic"
	spec["secretRef"] = map[string]any{"name": s.PullSecret}
	res.Changed = true
	res.addSecret(s.PullSecret)
}

// helmRepository points an OCI HelmRepository at the in-cluster registry
// when a carried image lies below its URL: Flux pulls <url>/<chart>:<version>,
// which the packages' push put at the same path there.
func (s *SourceRewriter) helmRepository(spec map[string]any, res *Result) error {
	if t, _ := spec["type"].(string); t != "oci" {
		return nil
	}
	u, _ := spec["url"].(string)
	rest, isOCI := strings.CutPrefix(u, "oci://")
	if !isOCI || s.Registry == "" {
		return nil
	}
	rest = strings.TrimSuffix(rest, "/")
	path, rewritten := strings.CutPrefix(rest, s.Registry+"/")
	if !rewritten || !s.carriesBelow(path, reference.Path) {
		host, p, _ := strings.Cut(rest, "/")
		if host == "index.docker.io" {
			host = "docker.io"
		}
		if p == "" || !s.carriesBelow(host+"/"+p, reference.Named.Name) {
			return nil
		}
		path = p
	}
	delete(spec, "certSecretRef")
	s.toRegistry(spec, path, res)
	return nil
}

// carriesBelow reports whether a carried image's repository, as name
// gives it (its normalized name, or its path in the registry), lies below
// prefix.
func (s *SourceRewriter) carriesBelow(prefix string, name func(reference.Named) string) bool {
	for key := range s.Images {
		if named, err := reference.ParseNormalizedNamed(key); err == nil && strings.HasPrefix(name(named), prefix+"/") {
			return true
		}
	}
	return false
}
