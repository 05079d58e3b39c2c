package dashboard

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// sbomPageBudget is what one page of an SBOM of 5,000 components may take
// through HTTP once the dashboard has read the document (issue 53;
// docs/performance.md).
const sbomPageBudget = 100 * time.Millisecond

// BenchmarkSBOMPage shows the SBOM the real helper makes of an image
// whose dpkg status lists 5,000 packages: the first page (the document
// read from the registry, its components read and sorted), then a page of
// it filtered and sorted by version, through HTTP. It fails over
// sbomPageBudget.
func BenchmarkSBOMPage(b *testing.B) {
	const n = 5000
	e := startSBOMs(b, "", sbomImage{ref: "example.com/flood:1", platforms: []string{"linux/amd64"},
		push: func(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error) {
			return fixture.DpkgFloodImage(ctx, dst, p, n)
		}})
	path := e.page(e.sbomOf(b, "example.com/flood:1", "linux/amd64"))
	get := func(q string) string {
		resp, page := do(b, e.c, http.MethodGet, e.base+path+q, nil, nil)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %s", q, resp.Status)
		}
		return page
	}
	start := time.Now()
	page := get("")
	first := time.Since(start)
	if !strings.Contains(page, `id="total">`) || len(rowsOf(page)) != sbomPerPage {
		b.Fatalf("the first page: %d rows", len(rowsOf(page)))
	}
	qs := []string{"", "?page=17", "?sort=version&dir=desc&q=flood-4", "?type=deb&sort=purl&per=500"}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		get(qs[i%len(qs)])
		i++
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/1000, "ms/op")
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
	if per > sbomPageBudget {
		b.Errorf("a page of %d components took %v, over the budget of %v", n, per, sbomPageBudget)
	}
}
