package bom

import (
	"cmp"
	"slices"

	"github.com/google/osv-scalibr/semantic"
)

// Sort orders components as tables show them: by type, then name, then
// version in the component's ecosystem's order (as strings where it has
// none), then package URL. Each component's ecosystem and version are
// read once, not at every comparison.
func Sort(cs []Component) {
	type keyed struct {
		c   Component
		eco string
		v   semantic.Version // nil where the version is none of eco's
	}
	ks := make([]keyed, len(cs))
	for i, c := range cs {
		k := keyed{c: c, eco: Ecosystem(c)}
		if k.eco != "" {
			v := c.Version
			if k.eco == "Go" {
				v = goVersion(v)
			}
			if Plausible(v) {
				k.v, _ = semantic.Parse(v, k.eco)
			}
		}
		ks[i] = k
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(a.c.Type, b.c.Type); c != 0 {
			return c
		}
		if c := cmp.Compare(a.c.Name, b.c.Name); c != 0 {
			return c
		}
		if a.c.Version != b.c.Version {
			if a.v != nil && b.v != nil && a.eco == b.eco {
				if c, err := a.v.Compare(b.v); err == nil && c != 0 {
					return c
				}
			}
			return cmp.Compare(a.c.Version, b.c.Version)
		}
		return cmp.Compare(a.c.PURL, b.c.PURL)
	})
	for i, k := range ks {
		cs[i] = k.c
	}
}
