package dashboard

import (
	"context"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/singleflight"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// maxCachedSBOMBytes bounds the SBOMs whose components the dashboard
// keeps between requests, counted by their documents' sizes (the
// components read from a document take less than it): the least recently
// shown go first.
const maxCachedSBOMBytes = 256 << 20

// sbomEntry is one SBOM read: what the page shows of it, its components
// in the document's order, and the orders of them that pages have asked
// for, each sorted once.
type sbomEntry struct {
	image, platform, format string
	doc                     digest.Digest
	size                    int64
	rows                    []compRow
	types                   []string // the components' types, sorted

	mu     sync.Mutex
	orders map[string][]int32 // by column: indexes of rows, ascending
}

func newSBOMEntry(comps []bom.Component) *sbomEntry {
	e := &sbomEntry{rows: make([]compRow, len(comps)), orders: map[string][]int32{}}
	for i, c := range comps {
		e.rows[i] = newCompRow(c)
		if c.Type != "" {
			e.types = append(e.types, c.Type)
		}
	}
	slices.Sort(e.types)
	e.types = slices.Compact(e.types)
	return e
}

// order is the indexes of e's rows sorted by column col, ascending.
func (e *sbomEntry) order(col string) []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o, ok := e.orders[col]; ok {
		return o
	}
	o := make([]int32, len(e.rows))
	for i := range o {
		o[i] = int32(i)
	}
	by := componentOrder(col)
	slices.SortStableFunc(o, func(a, b int32) int { return by(&e.rows[a], &e.rows[b]) })
	e.orders[col] = o
	return o
}

// sbomCache keeps SBOMs read, by the package root and the SBOM's referrer
// manifest digest: both content addresses, so an entry never goes stale.
// It is looked at only once the request's user has read the Package and
// opened the registry with their own credentials.
type sbomCache struct {
	mu      sync.Mutex
	entries map[string]*sbomEntry
	order   []string // least recently used first
	bytes   int64
	group   singleflight.Group // one read of a document at a time
}

func (c *sbomCache) get(key string) *sbomEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e != nil {
		c.touch(key)
	}
	return e
}

func (c *sbomCache) touch(key string) {
	if i := slices.Index(c.order, key); i >= 0 {
		c.order = slices.Delete(c.order, i, i+1)
	}
	c.order = append(c.order, key)
}

func (c *sbomCache) put(key string, e *sbomEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*sbomEntry{}
	}
	if old := c.entries[key]; old != nil {
		c.bytes -= old.size
	}
	c.entries[key] = e
	c.bytes += e.size
	c.touch(key)
	for c.bytes > maxCachedSBOMBytes && len(c.order) > 1 {
		k := c.order[0]
		c.order = c.order[1:]
		c.bytes -= c.entries[k].size
		delete(c.entries, k)
	}
}

// sbomEntry returns SBOM d of p, read with a's credentials or kept from an
// earlier read. Its registry is opened first whatever the cache holds, so
// that a user who may not read it is refused.
func (s *Server) sbomEntry(ctx context.Context, a *actor, p *v1alpha1.Package, d digest.Digest) (*sbomEntry, error) {
	if _, _, err := a.registry(ctx, s.opts.Namespace); err != nil {
		return nil, err
	}
	key := packageDigest(p) + "|" + d.String()
	if e := s.sboms.get(key); e != nil {
		return e, nil
	}
	v, err, _ := s.sboms.group.Do(key, func() (any, error) {
		doc, err := s.readSBOM(ctx, a, p, d)
		if err != nil {
			return nil, err
		}
		comps, err := readComponents(doc)
		if err != nil {
			return nil, err
		}
		e := newSBOMEntry(comps)
		e.image, e.platform, e.format = doc.Image, doc.Platform, doc.ArtifactType
		e.doc, e.size = digest.FromBytes(doc.Data), int64(len(doc.Data))
		s.sboms.put(key, e)
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*sbomEntry), nil
}
