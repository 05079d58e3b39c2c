package zarf

import "slices"

// SchemaFields lists the fields of Zarf v0.60.0's schema that convert
// reads, as Type.field (ZarfFile.source), sorted: what the register of
// inputs (internal/inputs) is checked against.
func SchemaFields() []string {
	var fields []string
	for typ, names := range knownFields {
		for _, n := range names {
			fields = append(fields, typ+"."+n)
		}
	}
	slices.Sort(fields)
	return fields
}
