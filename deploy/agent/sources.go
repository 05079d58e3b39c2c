package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"

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
// at the copies in the cluster: Flux GitRepository objects at the
// in-cluster git server, Flux OCIRepository objects at the artifact in the
// in-cluster registry (by digest), Argo CD Applications' git sources at
// the git server, each pinned to the carried commit. A source that names
// another revision of a carried repository is refused: nothing is
// resolved by branch name in the cluster. Flux HelmRepository objects of
// type oci whose URL holds carried OCI artifacts (charts carried as
// images, e.g. ghcr.io/org/charts/web:1.0.0 under oci://ghcr.io/org/charts)
// are pointed at the same path in the in-cluster registry, where the
// packages' push tagged them as they were tagged. Sources of repositories
// no package carries pass unchanged.
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
	// for HelmRepository objects.
	Images Images
}

// Rewrite changes obj (a decoded GitRepository, OCIRepository or
// Application) in place to use the carried copies; it reports whether it
// changed anything and which Secrets the object now needs in its namespace.
func (s *SourceRewriter) Rewrite(kind string, obj map[string]any) (changed bool, secrets []string, err error) {
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return false, nil, nil
	}
	switch kind {
	case "GitRepository":
		return s.gitRepository(spec)
	case "OCIRepository":
		return s.ociRepository(spec)
	case "Application":
		return s.application(spec)
	case "HelmRepository":
		return s.helmRepository(spec)
	}
	return false, nil, nil
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

func (s *SourceRewriter) gitRepository(spec map[string]any) (bool, []string, error) {
	u, _ := spec["url"].(string)
	g, ok := s.carried(u)
	if !ok {
		if g, ok = s.inCluster(u); !ok {
			return false, nil, nil
		}
	}
	ref, _ := spec["ref"].(map[string]any)
	if err := checkFluxRef(g, ref); err != nil {
		return false, nil, fmt.Errorf("GitRepository %s: %w", u, err)
	}
	want := map[string]any{"commit": g.Commit}
	if b, ok := strings.CutPrefix(g.Ref, "refs/heads/"); ok {
		want["branch"] = b
	} else if t, ok := strings.CutPrefix(g.Ref, "refs/tags/"); ok {
		want["tag"] = t
	}
	spec["url"], spec["ref"] = s.gitURL(g), want
	spec["secretRef"] = map[string]any{"name": s.GitSecret}
	delete(spec, "provider")
	return true, []string{s.GitSecret}, nil
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
			return fmt.Errorf("ref %s %q %w: it carries %s (digest %s)", k, val, ErrSourceRef, g.Revision, g.Digest)
		}
	}
	return nil
}

func (s *SourceRewriter) ociRepository(spec map[string]any) (bool, []string, error) {
	u, _ := spec["url"].(string)
	rest, isOCI := strings.CutPrefix(u, "oci://")
	if !isOCI {
		return false, nil, nil
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
			return false, nil, nil
		}
	}
	ref, _ := spec["ref"].(map[string]any)
	if err := checkFluxRef(g, ref); err != nil {
		return false, nil, fmt.Errorf("OCIRepository %s: %w", u, err)
	}
	spec["ref"] = map[string]any{"digest": g.Digest.String()}
	return s.toRegistry(spec, g.Path)
}

// toRegistry points a Flux OCI source's spec at path in the in-cluster
// registry: plain HTTP, no cloud provider's login, the registry's Secret.
func (s *SourceRewriter) toRegistry(spec map[string]any, path string) (bool, []string, error) {
	spec["url"] = "oci://" + s.Registry + "/" + path
	spec["insecure"] = true
	spec["provider"] = "generic"
	spec["secretRef"] = map[string]any{"name": s.PullSecret}
	return true, []string{s.PullSecret}, nil
}

// helmRepository points an OCI HelmRepository at the in-cluster registry
// when a carried image lies below its URL: Flux pulls <url>/<chart>:<version>,
// which the packages' push put at the same path there.
func (s *SourceRewriter) helmRepository(spec map[string]any) (bool, []string, error) {
	if t, _ := spec["type"].(string); t != "oci" {
		return false, nil, nil
	}
	u, _ := spec["url"].(string)
	rest, isOCI := strings.CutPrefix(u, "oci://")
	if !isOCI || s.Registry == "" {
		return false, nil, nil
	}
	rest = strings.TrimSuffix(rest, "/")
	path, rewritten := strings.CutPrefix(rest, s.Registry+"/")
	if !rewritten || !s.carriesBelow(path, reference.Path) {
		host, p, _ := strings.Cut(rest, "/")
		if host == "index.docker.io" {
			host = "docker.io"
		}
		if p == "" || !s.carriesBelow(host+"/"+p, reference.Named.Name) {
			return false, nil, nil
		}
		path = p
	}
	delete(spec, "certSecretRef")
	return s.toRegistry(spec, path)
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

func (s *SourceRewriter) application(spec map[string]any) (bool, []string, error) {
	var sources []map[string]any
	if src, ok := spec["source"].(map[string]any); ok {
		sources = append(sources, src)
	}
	if list, ok := spec["sources"].([]any); ok {
		for _, v := range list {
			if src, ok := v.(map[string]any); ok {
				sources = append(sources, src)
			}
		}
	}
	changed := false
	for _, src := range sources {
		u, _ := src["repoURL"].(string)
		if _, isChart := src["chart"]; isChart { // a Helm repository, not git
			continue
		}
		g, ok := s.carried(u)
		if !ok {
			if g, ok = s.inCluster(u); !ok {
				continue
			}
		}
		rev, _ := src["targetRevision"].(string)
		short := strings.TrimPrefix(strings.TrimPrefix(g.Ref, "refs/heads/"), "refs/tags/")
		if !slices.Contains([]string{"", "HEAD", g.Ref, short, g.Commit}, rev) {
			return false, nil, fmt.Errorf("Application source %s: targetRevision %q %w: it carries %s", u, rev, ErrSourceRef, g.Revision)
		}
		src["repoURL"], src["targetRevision"] = s.gitURL(g), g.Commit
		changed = true
	}
	if !changed {
		return false, nil, nil
	}
	return true, []string{s.ArgoSecret}, nil
}
