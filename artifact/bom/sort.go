package bom

import (
	"cmp"
	"slices"
)

// Sort orders components as tables show them: by type, then name, then
// version in the component's ecosystem's order (as strings where it has
// none), then package URL.
func Sort(cs []Component) {
	slices.SortStableFunc(cs, func(a, b Component) int {
		if c := cmp.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if a.Version != b.Version {
			if c, ok := compareVersions(Ecosystem(a), a.Version, b.Version); ok && c != 0 && Ecosystem(a) == Ecosystem(b) {
				return c
			}
			return cmp.Compare(a.Version, b.Version)
		}
		return cmp.Compare(a.PURL, b.PURL)
	})
}
