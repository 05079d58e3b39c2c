package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/artifact/bomscan"
	clusterscan "github.com/ferrypkg/ferry/deploy/bomscan"
)

// The fleet's search and findings pages (/fleet/sbom/…): the cluster's
// pages over what the centre holds, every version its release tracks hold
// (deploy/bomscan.Fleet), each located at the members that report running
// it. The tracks and members are read as the user, like every fleet page;
// the centre's registry with the dashboard's registry flags, as promote
// and bundle read it (a user has no credentials of their own there). The
// only write is the index (bomscan.FleetIndexRepository), derived data
// made again from the carried SBOMs alone: if the registry refuses it, the
// index is kept in memory and the pages still answer.

// fleetRegistry is the centre's registry, opened once.
type fleetRegistry struct {
	once sync.Once
	reg  registry.Registry
	err  error
}

// fleetRegistry opens the centre's registry (FleetOptions.Registry).
func (s *Server) fleetRegistry() (registry.Registry, error) {
	s.fleetReg.once.Do(func() {
		o := s.opts.Fleet
		if o == nil || o.Registry == "" {
			s.fleetReg.err = errors.New("the dashboard was started without the centre's registry, which holds the fleet's SBOMs")
			return
		}
		s.fleetReg.reg, s.fleetReg.err = o.Remote.Registry(o.Registry)
	})
	return s.fleetReg.reg, s.fleetReg.err
}

// fleetScan returns a's scan of what the centre holds, a fresh one if the
// last is older than scanTTL.
func (s *Server) fleetScan(ctx context.Context, a *actor) (*scan, error) {
	reg, err := s.fleetRegistry()
	if err != nil {
		return nil, err
	}
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	if a.fleetScan != nil && time.Since(a.fleetScan.at) < scanTTL {
		return a.fleetScan, nil
	}
	sc := clusterscan.Fleet(a.fc, s.fleetNamespace(), reg)
	sc.OnSaveError = func(err error) {
		s.log.Info("dashboard: the fleet's SBOM index is kept in memory only", "registry", s.opts.Fleet.Registry, "reason", err)
	}
	idx, locs, err := sc.Sync(ctx)
	if err != nil {
		return nil, fmt.Errorf("the SBOMs the centre holds: %w", err)
	}
	a.fleetScan = &scan{idx: idx, locs: locs, at: time.Now()}
	return a.fleetScan, nil
}

// fleetDB returns the fleet's advisory database (deploy/bomscan.FleetDB),
// the one read within scanTTL if any.
func (s *Server) fleetDB(ctx context.Context, a *actor, reg registry.Registry) (*deployedDB, error) {
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	if d := a.fleetDB; d != nil && time.Since(d.at) < scanTTL {
		return d, nil
	}
	db, layers, err := clusterscan.FleetDB(ctx, a.fc, s.fleetNamespace(), reg)
	if err != nil && !errors.Is(err, clusterscan.ErrNoFleetDB) {
		return nil, fmt.Errorf("the fleet's advisory database: %w", err)
	}
	a.fleetDB = &deployedDB{db: db, layers: layers, err: err, at: time.Now()}
	return a.fleetDB, nil
}

// fleetSearchPage answers a query (bom.ParseQuery's language) over every
// SBOM of what the centre holds; each hit names the members running it.
func (s *Server) fleetSearchPage(w http.ResponseWriter, r *http.Request) {
	v := &searchView{view: s.view(r, "Fleet SBOM search"), Q: r.URL.Query().Get("q")}
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	q, ok := v.query()
	if !ok {
		s.render(w, r, "fleetsearch", v)
		return
	}
	sc, err := s.fleetScan(r.Context(), a)
	if err != nil {
		v.Error = oneLine(err.Error())
		s.renderStatus(w, r, statusOf(err), "fleetsearch", v)
		return
	}
	v.answer(sc, q, nil)
	s.render(w, r, "fleetsearch", v)
}

// memberFindings are one member's findings: of the versions it reports
// running.
type memberFindings struct {
	Name          string
	Findings, IDs int
	Versions      []string // "package version", sorted
}

// fleetAuditView is the fleet's findings page: the cluster's, by package
// version, and by member.
type fleetAuditView struct {
	auditView
	Members []*memberFindings
}

// fleetAuditPage shows the findings of the fleet's advisory database over
// every SBOM the centre holds, by package version and by member.
func (s *Server) fleetAuditPage(w http.ResponseWriter, r *http.Request) {
	v := &fleetAuditView{auditView: auditView{view: s.view(r, "Fleet findings"), Scope: "the fleet"}}
	a, ok := s.fleetActor(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	fail := func(err error) {
		v.Error = oneLine(err.Error())
		s.renderStatus(w, r, statusOf(err), "fleetaudit", v)
	}
	reg, err := s.fleetRegistry()
	if err != nil {
		fail(err)
		return
	}
	d, err := s.fleetDB(ctx, a, reg)
	if err != nil {
		fail(err)
		return
	}
	if d.err != nil {
		v.NoDB = true
		s.render(w, r, "fleetaudit", v)
		return
	}
	v.DB = s.dbView(d.db.Date(), d.db.Len(), d.layers)
	sc, err := s.fleetScan(ctx, a)
	if err != nil {
		fail(err)
		return
	}
	fs := bomscan.AuditIndex(sc.idx, sc.locs, d.db)
	v.group("", fs)
	v.Members = byMember(fs)
	s.render(w, r, "fleetaudit", v)
}

// byMember counts fs by the members that run them ("member NAME"), most
// findings first.
func byMember(fs []bomscan.Finding) []*memberFindings {
	type acc struct {
		m        *memberFindings
		ids      map[string]bool
		versions map[string]bool
	}
	by := map[string]*acc{}
	for _, f := range fs {
		for _, run := range f.Runs {
			name, ok := strings.CutPrefix(run, "member ")
			if !ok {
				continue
			}
			m := by[name]
			if m == nil {
				m = &acc{m: &memberFindings{Name: clip(name)}, ids: map[string]bool{}, versions: map[string]bool{}}
				by[name] = m
			}
			m.m.Findings++
			m.ids[f.Match.ID] = true
			m.versions[clip(f.Package)+" "+clip(f.Location.Version)] = true
		}
	}
	out := make([]*memberFindings, 0, len(by))
	for _, m := range by {
		m.m.IDs = len(m.ids)
		for v := range m.versions {
			m.m.Versions = append(m.m.Versions, v)
		}
		slices.Sort(m.m.Versions)
		out = append(out, m.m)
	}
	slices.SortFunc(out, func(a, b *memberFindings) int { return cmp.Or(b.Findings-a.Findings, strings.Compare(a.Name, b.Name)) })
	return out
}
