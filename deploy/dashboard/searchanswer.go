package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
)

// The search pages' common steps, a cluster's (/c/{cluster}/sbom/search)
// and the fleet's (/fleet/sbom/search): parse the query, then list what a
// scan's index answers.

// query parses v.Q (bom.ParseQuery's language); false when there is
// nothing to search: no query, or one v.Error says is wrong.
func (v *searchView) query() (bom.Query, bool) {
	if strings.TrimSpace(v.Q) == "" {
		return bom.Query{}, false
	}
	if len(v.Q) > maxFilter {
		v.Error = fmt.Sprintf("the query is %d bytes long; at most %d", len(v.Q), maxFilter)
		return bom.Query{}, false
	}
	q, err := bom.ParseQuery(v.Q)
	if err != nil {
		v.Error = oneLine(err.Error())
		return bom.Query{}, false
	}
	v.Query, v.Searched = q.String(), true
	return q, true
}

// answer lists sc's hits of q in v (at most maxHits, the rest counted),
// each linked to what link names for its location and component (nil:
// no link).
func (v *searchView) answer(sc *scan, q bom.Query, link func(l bomscan.Location, name string) string) {
	v.SBOMs, v.At = sc.idx.Len(), sc.at.Format(time.RFC3339)
	hits := bomscan.QueryIndex(sc.idx, sc.locs, q)
	if len(hits) > maxHits {
		v.More = len(hits) - maxHits
		hits = hits[:maxHits]
	}
	for _, h := range hits {
		row := hitRow{Package: clip(h.Package), Version: clip(h.Location.Version), Image: clip(h.Image), Platform: h.Platform,
			Name: clip(h.Component.Name), CompVersion: clip(h.Component.Version), PURL: clip(h.Component.PURL), Runs: clipAll(h.Runs)}
		if link != nil {
			row.Link = link(h.Location, h.Component.Name)
		}
		v.Hits = append(v.Hits, row)
	}
}
