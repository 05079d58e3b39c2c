package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	clusterscan "github.com/ferrypkg/ferry/deploy/bomscan"
)

// maxFindings bounds the findings a page lists; the rest are counted.
const maxFindings = 2000

// findingRow is one advisory that names one component of an image.
type findingRow struct {
	ID, Aliases, Summary, Severity string
	Component, Installed, Fixed    string
	PURL                           string
}

// auditImage is one image platform's findings.
type auditImage struct {
	Image, Platform string
	Runs            []string
	Link            string // its SBOM's page
	Findings        []findingRow
}

// auditPackage is one package's findings, by image.
type auditPackage struct {
	Name, Version, Where string // Where: the Package ("NS/NAME")
	Link                 string // its audit page
	Findings             int
	Images               []*auditImage
}

// auditView is the findings page: of the cluster, one Package, or one
// image (Scope).
type auditView struct {
	view
	Scope, Image, Error string
	NoDB                bool
	DB                  dbView
	Findings, IDs       int
	Images              int
	Hidden              int // findings counted but not listed (maxFindings)
	Packages            []*auditPackage
}

// dbView is what the page says of the advisory database.
type dbView struct {
	Date, Age, MaxAge string
	Old               bool
	Records           int
	Layers            []artifact.Advisories
}

// auditPage shows the findings of the cluster's deployed advisory
// database over every SBOM of its Packages; with {namespace}/{name}, of
// that Package's; with ?image=, of that image's.
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request) {
	a, ok := s.clusterActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	v := &auditView{view: s.view(r, "Findings"), Scope: "cluster " + a.cluster, Image: r.URL.Query().Get("image")}
	if name != "" {
		v.Scope = "Package " + ns + "/" + name
	}
	if len(v.Image) > maxFilter {
		v.Error = fmt.Sprintf("the image is %d bytes long; at most %d", len(v.Image), maxFilter)
		v.Image = ""
	}
	reg, _, err := a.registry(ctx, s.opts.Namespace)
	if err != nil {
		v.Error = "the in-cluster registry: " + oneLine(err.Error())
		s.render(w, r, "audit", v)
		return
	}
	db, layers, err := s.clusterDB(ctx, a, reg)
	switch {
	case errors.Is(err, clusterscan.ErrNoDB):
		v.NoDB = true
		s.render(w, r, "audit", v)
		return
	case err != nil:
		v.Error = oneLine(err.Error())
		s.render(w, r, "audit", v)
		return
	}
	v.DB = s.dbView(db.Date(), db.Len(), layers)
	sc, err := s.scan(ctx, a)
	if err != nil {
		v.Error = oneLine(err.Error())
		s.render(w, r, "audit", v)
		return
	}
	fs := bomscan.AuditIndex(sc.idx, sc.locs, db)
	if name != "" {
		fs = slices.DeleteFunc(fs, func(f bomscan.Finding) bool { return !slices.Contains(f.Runs, ns+"/"+name) })
	}
	if v.Image != "" {
		fs = slices.DeleteFunc(fs, func(f bomscan.Finding) bool { return f.Image != v.Image })
	}
	v.group(a.cluster, fs)
	s.render(w, r, "audit", v)
}

// deployedDB is the advisory database a user found deployed in a cluster.
type deployedDB struct {
	db     *advisory.DB
	layers []artifact.Advisories
	err    error // ErrNoDB, or why it could not be read
	at     time.Time
}

// clusterDB returns the advisory database deployed in a's cluster (read
// as a's user), the one read within scanTTL if any.
func (s *Server) clusterDB(ctx context.Context, a *actor, reg registry.Registry) (*advisory.DB, []artifact.Advisories, error) {
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	if d := a.lastDB; d != nil && time.Since(d.at) < scanTTL {
		return d.db, d.layers, d.err
	}
	repo, root, err := clusterscan.FindDB(ctx, a.pc, s.opts.Namespace, reg)
	var db *advisory.DB
	var layers []artifact.Advisories
	if err == nil {
		db, layers, err = s.dbs.read(ctx, reg, repo, root)
	}
	if err == nil || errors.Is(err, clusterscan.ErrNoDB) {
		a.lastDB = &deployedDB{db: db, layers: layers, err: err, at: time.Now()}
	}
	return db, layers, err
}

// dbCache keeps the advisory database last read, by its package's root
// digest (a content address): every user who finds that database
// deployed, with their own credentials, shares one copy in memory and one
// read of it (a database of a million records takes a gigabyte).
type dbCache struct {
	mu     sync.Mutex
	root   string
	db     *advisory.DB
	layers []artifact.Advisories
	group  singleflight.Group
}

// read returns the database of root in repo, read from reg unless kept.
func (c *dbCache) read(ctx context.Context, reg registry.Registry, repo, root string) (*advisory.DB, []artifact.Advisories, error) {
	c.mu.Lock()
	if c.root == root && c.db != nil {
		db, layers := c.db, c.layers
		c.mu.Unlock()
		return db, layers, nil
	}
	c.mu.Unlock()
	v, err, _ := c.group.Do(root, func() (any, error) {
		db, layers, err := clusterscan.ReadDB(ctx, reg, repo, root)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.root, c.db, c.layers = root, db, layers
		c.mu.Unlock()
		return &deployedDB{db: db, layers: layers}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	d := v.(*deployedDB)
	return d.db, d.layers, nil
}

// dbView describes a database of date, old past s's AdvisoryMaxAge.
func (s *Server) dbView(date time.Time, records int, layers []artifact.Advisories) dbView {
	maxAge := cmp.Or(s.opts.AdvisoryMaxAge, DefaultAdvisoryMaxAge)
	d := dbView{Records: records, Layers: layers, MaxAge: days(maxAge)}
	if date.IsZero() {
		d.Date, d.Age, d.Old = "unknown", "unknown", true
		return d
	}
	d.Date, d.Age, d.Old = date.UTC().Format("2006-01-02 15:04 MST"), days(time.Since(date)), time.Since(date) > maxAge
	return d
}

// days is d in whole days, or hours under two days.
func days(d time.Duration) string {
	n, unit := int(d.Hours()/24), "day"
	if d < 48*time.Hour {
		n, unit = int(d.Hours()), "hour"
	}
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// group sorts fs into v's packages and images, and counts them.
func (v *auditView) group(cluster string, fs []bomscan.Finding) {
	pkgs := map[string]*auditPackage{}
	imgs := map[string]*auditImage{}
	ids := map[string]bool{}
	for _, f := range fs {
		where := ""
		for _, run := range f.Runs {
			if !strings.HasPrefix(run, "pod ") && strings.Contains(run, "/") {
				where = run
				break
			}
		}
		pk := where + "\x00" + f.Package + "\x00" + f.Location.Version
		p := pkgs[pk]
		if p == nil {
			p = &auditPackage{Name: clip(f.Package), Version: clip(f.Location.Version), Where: clip(where)}
			if ns, name, ok := strings.Cut(where, "/"); ok {
				p.Link = "/c/" + url.PathEscape(cluster) + "/packages/" + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/audit"
			}
			pkgs[pk] = p
			v.Packages = append(v.Packages, p)
		}
		ik := pk + "\x00" + f.SBOM.String()
		img := imgs[ik]
		if img == nil {
			img = &auditImage{Image: clip(f.Image), Platform: f.Platform, Runs: clipAll(f.Runs), Link: sbomLinkOf(cluster, f.Location, "")}
			imgs[ik] = img
			p.Images = append(p.Images, img)
		}
		m := f.Match
		p.Findings++
		v.Findings++
		ids[m.ID] = true
		if v.Findings > maxFindings {
			v.Hidden++
			continue
		}
		img.Findings = append(img.Findings, findingRow{ID: clip(m.ID), Aliases: clip(strings.Join(m.Aliases, ", ")), Summary: clip(m.Summary),
			Severity: clip(m.Severity), Component: clip(f.Component.Name), Installed: clip(m.Installed), Fixed: clip(m.Fixed), PURL: clip(f.Component.PURL)})
	}
	v.IDs, v.Images = len(ids), len(imgs)
	slices.SortFunc(v.Packages, func(a, b *auditPackage) int {
		return cmp.Or(b.Findings-a.Findings, strings.Compare(a.Where, b.Where), strings.Compare(a.Name, b.Name))
	})
	for _, p := range v.Packages {
		slices.SortFunc(p.Images, func(a, b *auditImage) int {
			return cmp.Or(len(b.Findings)-len(a.Findings), strings.Compare(a.Image, b.Image), strings.Compare(a.Platform, b.Platform))
		})
	}
}
