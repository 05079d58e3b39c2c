// Package bomscan finds the SBOMs that packages carry — in one package, in
// a registry, and (package deploy/bomscan) in a cluster and across a fleet
// — and answers queries and audits over them: which images hold a
// component, which components an advisory database names at an affected
// version. An index (bom.Index) kept in a Store spares a repeated scan from
// reading the SBOMs again; it is made from the carried SBOMs alone, so a
// lost or damaged index is rebuilt with the same answers.
package bomscan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bom"
)

// Location is where an SBOM is found: the package that carries it, the
// image and platform it describes, and where that image runs.
type Location struct {
	// Package and Version are the package's name and version (ferry.json's).
	Package string `json:"package"`
	Version string `json:"version"`
	// Image is the image's original reference, as ferry.json records it.
	Image string `json:"image"`
	// Platform is the image platform the SBOM describes (os/arch[/variant]).
	Platform string `json:"platform"`
	// SBOM is the SBOM's referrer manifest, as ferry.json records it.
	SBOM digest.Digest `json:"sbom"`
	// Runs says where the image runs: "ns/package" (a cluster's Package),
	// "pod ns/name", "member NAME"; empty for a package or a registry.
	Runs []string `json:"runs,omitempty"`
}

// Hit is a component a query matched, and where its SBOM is.
type Hit struct {
	Location
	Component bom.Component `json:"component"`
}

// Finding is a component an advisory names at its installed version, and
// where its SBOM is.
type Finding struct {
	Location
	Component bom.Component  `json:"component"`
	Match     advisory.Match `json:"advisory"`
}

// SBOMRef is one SBOM a Source found, not read yet.
type SBOMRef struct {
	Location
	// MediaType is the document's (definition.ArtifactTypeSPDX, …).
	MediaType string
	// Size bounds the document's size: ferry.json's record of the SBOM
	// (manifest, config and document together).
	Size int64
	// Fetch opens the document; its reader fails instead of reaching the
	// end of a document that does not match its digest.
	Fetch func(context.Context) (io.ReadCloser, error)
}

// Source finds SBOMs. It returns one SBOMRef per SBOM per place the SBOM is
// found: the same SBOM digest may repeat with other Locations.
type Source interface {
	SBOMs(ctx context.Context) ([]SBOMRef, error)
}

// Store keeps an index between scans. Load of an index never saved
// returns an empty index and no error.
type Store interface {
	Load(ctx context.Context) (*bom.Index, error)
	Save(ctx context.Context, idx *bom.Index) error
}

// Bounds of a scan.
const (
	// MaxSBOMs bounds the SBOM references a source may return (100,000).
	MaxSBOMs = 100_000
	// MaxPackages bounds the packages a registry, cluster or fleet source
	// reads (10,000).
	MaxPackages = 10_000
	// MaxTags bounds the tags a registry source lists and resolves, over
	// all the repositories of the registry (100,000).
	MaxTags = 100_000
	// DefaultConcurrency is how many SBOMs a scan reads at once.
	DefaultConcurrency = 4
)

// Scanner reads the SBOMs of a Source into an index and answers queries
// and audits over them.
type Scanner struct {
	// Source finds the SBOMs.
	Source Source
	// Store keeps the index between scans; nil keeps none (every SBOM is
	// read each time).
	Store Store
	// Limits bound each SBOM document read; the zero value is
	// bom.DefaultLimits.
	Limits bom.Limits
	// Progress, if set, is told how many of the SBOMs to read are read.
	Progress func(done, total int)
	// OnSaveError, if set, is told why the index could not be saved (the
	// user may read the registry but not write to it). A failed save
	// does not fail the scan: the index still answers.
	OnSaveError func(error)
	// Concurrency bounds the SBOMs read at once; if ≤ 0,
	// DefaultConcurrency.
	Concurrency int
	// Rebuild ignores the stored index: every SBOM is read again and the
	// index saved anew.
	Rebuild bool
}

// Sync brings the index up to date with the source: it reads and indexes
// only the SBOMs the stored index lacks, drops those no longer carried,
// and saves the index if it changed. It returns the index and, for each
// SBOM digest, the places it is found. An index that cannot be loaded
// (damaged, or of another format) is made again from the SBOMs.
func (s *Scanner) Sync(ctx context.Context) (*bom.Index, map[digest.Digest][]Location, error) {
	refs, err := s.Source.SBOMs(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(refs) > MaxSBOMs {
		return nil, nil, fmt.Errorf("%d SBOMs found, more than %d", len(refs), MaxSBOMs)
	}
	locs := map[digest.Digest][]Location{}
	first := map[digest.Digest]SBOMRef{}
	var order []digest.Digest
	for _, r := range refs {
		if _, ok := first[r.SBOM]; !ok {
			first[r.SBOM] = r
			order = append(order, r.SBOM)
		}
		if !slices.ContainsFunc(locs[r.SBOM], func(l Location) bool { return sameLocation(l, r.Location) }) {
			locs[r.SBOM] = append(locs[r.SBOM], r.Location)
		}
	}
	idx, changed, err := s.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	if idx.Retain(func(d digest.Digest) bool { _, ok := first[d]; return ok }) > 0 {
		changed = true
	}
	var missing []SBOMRef
	for _, d := range order {
		if !idx.Has(d) {
			missing = append(missing, first[d])
		}
	}
	if len(missing) > 0 {
		if err := s.read(ctx, idx, missing); err != nil {
			return nil, nil, err
		}
		changed = true
	}
	if changed && s.Store != nil {
		if err := s.Store.Save(ctx, idx); err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			if s.OnSaveError != nil {
				s.OnSaveError(err)
			}
		}
	}
	return idx, locs, nil
}

// load loads the stored index; changed is set when it had to start anew.
func (s *Scanner) load(ctx context.Context) (idx *bom.Index, changed bool, err error) {
	if s.Store == nil {
		return bom.NewIndex(), false, nil
	}
	if s.Rebuild {
		return bom.NewIndex(), true, nil
	}
	idx, err = s.Store.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return bom.NewIndex(), true, nil
	}
	if idx == nil {
		return bom.NewIndex(), true, nil
	}
	return idx, false, nil
}

// read reads refs into idx, a few at once.
func (s *Scanner) read(ctx context.Context, idx *bom.Index, refs []SBOMRef) error {
	lim := s.Limits
	if reflect.ValueOf(lim).IsZero() {
		lim = bom.DefaultLimits
	}
	n := s.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	var mu sync.Mutex
	done := 0
	if s.Progress != nil {
		s.Progress(0, len(refs))
	}
	for _, r := range refs {
		g.Go(func() error {
			comps, err := readSBOM(gctx, r, lim)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			idx.Add(r.SBOM, comps)
			done++
			if s.Progress != nil {
				s.Progress(done, len(refs))
			}
			return nil
		})
	}
	return g.Wait()
}

// readSBOM reads the components of one SBOM.
func readSBOM(ctx context.Context, r SBOMRef, lim bom.Limits) ([]bom.Component, error) {
	rc, err := r.Fetch(ctx)
	if err != nil {
		return nil, fmt.Errorf("SBOM %s of %s (%s) in %s: %w", r.SBOM, r.Image, r.Platform, packageName(r.Location), err)
	}
	defer rc.Close()
	comps, err := bom.Read(io.LimitReader(rc, artifact.MaxSBOMSize+1), r.MediaType, lim)
	if err != nil {
		return nil, fmt.Errorf("SBOM %s of %s (%s) in %s: %w", r.SBOM, r.Image, r.Platform, packageName(r.Location), err)
	}
	// The document must be read to its end for its digest to be checked.
	if _, err := io.Copy(io.Discard, io.LimitReader(rc, artifact.MaxSBOMSize)); err != nil {
		return nil, fmt.Errorf("SBOM %s of %s (%s) in %s: %w", r.SBOM, r.Image, r.Platform, packageName(r.Location), err)
	}
	return comps, nil
}

// packageName is "name version" of l's package.
func packageName(l Location) string {
	if l.Version == "" {
		return "package " + l.Package
	}
	return "package " + l.Package + " " + l.Version
}

func sameLocation(a, b Location) bool {
	return a.Package == b.Package && a.Version == b.Version && a.Image == b.Image && a.Platform == b.Platform &&
		a.SBOM == b.SBOM && slices.Equal(a.Runs, b.Runs)
}

// Query returns every component of the source's SBOMs that q matches, at
// each place its SBOM is found, sorted by package, image, platform and
// component.
func (s *Scanner) Query(ctx context.Context, q bom.Query) ([]Hit, error) {
	idx, locs, err := s.Sync(ctx)
	if err != nil {
		return nil, err
	}
	return QueryIndex(idx, locs, q), nil
}

// QueryIndex answers q from an index Sync returned.
func QueryIndex(idx *bom.Index, locs map[digest.Digest][]Location, q bom.Query) []Hit {
	hits := []Hit{}
	idx.Query(q, func(d digest.Digest, c bom.Component) bool {
		for _, l := range locs[d] {
			hits = append(hits, Hit{Location: l, Component: c})
		}
		return true
	})
	slices.SortStableFunc(hits, func(a, b Hit) int {
		return cmp.Or(compareLocation(a.Location, b.Location), compareComponent(a.Component, b.Component))
	})
	return slices.CompactFunc(hits, func(a, b Hit) bool {
		return sameLocation(a.Location, b.Location) && compareComponent(a.Component, b.Component) == 0
	})
}

// Audit returns every component of the source's SBOMs that an advisory of
// db names at its installed version, at each place its SBOM is found,
// sorted by advisory, package, image and platform.
func (s *Scanner) Audit(ctx context.Context, db *advisory.DB) ([]Finding, error) {
	if db == nil {
		return nil, errors.New("no advisory database to audit against")
	}
	idx, locs, err := s.Sync(ctx)
	if err != nil {
		return nil, err
	}
	return AuditIndex(idx, locs, db), nil
}

// AuditIndex matches the components of an index Sync returned against db.
func AuditIndex(idx *bom.Index, locs map[digest.Digest][]Location, db *advisory.DB) []Finding {
	fs := []Finding{}
	idx.Each(func(d digest.Digest, comps []bom.Component) bool {
		ls := locs[d]
		if len(ls) == 0 {
			return true
		}
		for _, c := range comps {
			for _, m := range db.Match(c) {
				for _, l := range ls {
					fs = append(fs, Finding{Location: l, Component: c, Match: m})
				}
			}
		}
		return true
	})
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Match.ID, b.Match.ID), compareLocation(a.Location, b.Location), compareComponent(a.Component, b.Component))
	})
	return slices.CompactFunc(fs, func(a, b Finding) bool {
		return a.Match.ID == b.Match.ID && sameLocation(a.Location, b.Location) && compareComponent(a.Component, b.Component) == 0
	})
}

func compareLocation(a, b Location) int {
	return cmp.Or(cmp.Compare(a.Package, b.Package), cmp.Compare(a.Version, b.Version), cmp.Compare(a.Image, b.Image),
		cmp.Compare(a.Platform, b.Platform), cmp.Compare(a.SBOM, b.SBOM), slices.Compare(a.Runs, b.Runs))
}

func compareComponent(a, b bom.Component) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version), cmp.Compare(a.PURL, b.PURL), cmp.Compare(a.Type, b.Type))
}
