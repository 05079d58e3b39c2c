package registry

import (
	"net/http"
	"strconv"
)

// catalogMaxEntries is the most repositories one GET /v2/_catalog answers
// (distribution's default for catalog.maxentries). A client asking for more
// gets this many and a Link header to the rest.
const catalogMaxEntries = 1000

// clampCatalogPage lowers a catalog request's n to catalogMaxEntries.
// distribution answers n above catalog.maxentries with 400
// PAGINATION_NUMBER_INVALID, where its tags list (and the spec, for tags)
// returns fewer results with a Link header; clients that ask for a large page
// (crane asks for 10000 past the first page size) then fail.
func clampCatalogPage(r *http.Request) {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n <= catalogMaxEntries {
		return
	}
	q.Set("n", strconv.Itoa(catalogMaxEntries))
	r.URL.RawQuery = q.Encode()
}
