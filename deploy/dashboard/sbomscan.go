package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	clusterscan "github.com/ferrypkg/ferry/deploy/bomscan"
)

// The search and findings pages: queries and audits over every SBOM the
// cluster's Packages carry, through the cluster's index (deploy/bomscan),
// read as the user: their Package list, their Pods, their way to the
// registry. A user who may not write to the registry still gets answers:
// the index is then kept in memory only.

const (
	// scanTTL is how long a scan of a cluster answers its user's pages
	// before the next page scans again (a scan reads only what changed).
	scanTTL = 30 * time.Second
	// maxHits bounds the hits a search page lists; the rest are counted.
	maxHits = 500
	// DefaultAdvisoryMaxAge is the age past which a deployed advisory
	// database is shown as old, unless Options.AdvisoryMaxAge says.
	DefaultAdvisoryMaxAge = 30 * 24 * time.Hour
)

// scan is a scan of one cluster as one user: its index and where each
// SBOM is found.
type scan struct {
	idx  *bom.Index
	locs map[digest.Digest][]bomscan.Location
	at   time.Time
}

// scan returns a's scan of its cluster, a fresh one if the last is older
// than scanTTL.
func (s *Server) scan(ctx context.Context, a *actor) (*scan, error) {
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	if a.last != nil && time.Since(a.last.at) < scanTTL {
		return a.last, nil
	}
	reg, _, err := a.registry(ctx, s.opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("the in-cluster registry: %w", err)
	}
	sc := clusterscan.Cluster(a.pc, s.opts.Namespace, reg)
	sc.OnSaveError = func(err error) {
		s.log.Info("dashboard: the SBOM index is kept in memory only", "cluster", a.cluster, "reason", err)
	}
	idx, locs, err := sc.Sync(ctx)
	if err != nil {
		return nil, err
	}
	a.last = &scan{idx: idx, locs: locs, at: time.Now()}
	return a.last, nil
}

// hitRow is one component a search found, where its SBOM is and where
// its image runs.
type hitRow struct {
	Package, Version, Image, Platform string
	Name, CompVersion, PURL           string
	Runs                              []string
	Link                              string // its SBOM's page, filtered to it
}

type searchView struct {
	view
	Q, Query string
	Error    string
	Searched bool
	Hits     []hitRow
	More     int
	SBOMs    int
	At       string
}

// searchPage answers a query (bom.ParseQuery's language) over every SBOM
// of the cluster's Packages.
func (s *Server) searchPage(w http.ResponseWriter, r *http.Request) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	v := &searchView{view: s.view(r, "SBOM search"), Q: r.URL.Query().Get("q")}
	q, ok := v.query()
	if !ok {
		s.render(w, r, "search", v)
		return
	}
	sc, err := s.scan(r.Context(), a)
	if err != nil {
		v.Error = oneLine(err.Error())
		s.render(w, r, "search", v)
		return
	}
	v.answer(sc, q, func(l bomscan.Location, name string) string { return sbomLinkOf(a.cluster, l, name) })
	s.render(w, r, "search", v)
}

// sbomLinkOf is the page of l's SBOM in the Package that carries it (its
// "NS/NAME" place), filtered to component name; "" if l names none.
func sbomLinkOf(cluster string, l bomscan.Location, name string) string {
	for _, run := range l.Runs {
		ns, pkg, ok := strings.Cut(run, "/")
		if !ok || strings.Contains(run, " ") {
			continue
		}
		link := "/c/" + url.PathEscape(cluster) + "/packages/" + url.PathEscape(ns) + "/" + url.PathEscape(pkg) + "/sboms/" + l.SBOM.String()
		if name != "" && len(name) <= maxFilter {
			link += "?q=" + url.QueryEscape(name)
		}
		return link
	}
	return ""
}

func clipAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clip(s)
	}
	return out
}

// redirectToCluster sends /sbom/… to the first cluster's page.
func (s *Server) redirectToCluster(page string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := "/c/" + url.PathEscape(s.opts.Clusters[0].Name) + "/sbom/" + page
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, u, http.StatusSeeOther)
	}
}
