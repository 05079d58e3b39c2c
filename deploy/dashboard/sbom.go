package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/osv-scalibr/semantic"
	"github.com/opencontainers/go-digest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// The SBOM pages: one image platform's SBOM as a table of its components
// (filtered, sorted and paginated on the server, so that they work
// without script and any table is one page of bounded size), and the
// document as carried.

const (
	// sbomPerPage is the rows of a page unless the request asks for
	// another count, at most sbomMaxPerPage.
	sbomPerPage    = 100
	sbomMaxPerPage = 500
	// maxFilter bounds the filter's text (and a search's query): longer is
	// refused in one line.
	maxFilter = 1024
	// maxCell bounds what a table cell shows of one value (a name, a
	// license, a package URL); the rest is cut, marked with an ellipsis.
	maxCell = 256
)

// sbomColumns are the columns a table sorts by, in the page's order.
var sbomColumns = []string{"name", "version", "type", "licenses", "purl"}

// sbomFilter is what the table's query parameters ask for.
type sbomFilter struct {
	Q, Type, Sort string
	Desc          bool
	Page, Per     int
}

// parseFilter reads the table's query parameters: q (a substring of the
// name or package URL, any case), type (a package URL type), sort (a
// column), dir (asc, desc), page (from 1), per (rows, ≤ 500). A value out
// of range is taken as its default; a filter too long is an error.
func parseFilter(q url.Values) (sbomFilter, error) {
	f := sbomFilter{Q: strings.TrimSpace(q.Get("q")), Type: q.Get("type"), Sort: q.Get("sort"), Desc: q.Get("dir") == "desc", Page: 1, Per: sbomPerPage}
	if !slices.Contains(sbomColumns, f.Sort) {
		f.Sort = "name"
	}
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n > 0 {
		f.Page = n
	}
	if n, err := strconv.Atoi(q.Get("per")); err == nil && n > 0 {
		f.Per = min(n, sbomMaxPerPage)
	}
	var err error
	if len(f.Q) > maxFilter || len(f.Type) > maxFilter {
		err = fmt.Errorf("the filter is %d bytes long; at most %d", max(len(f.Q), len(f.Type)), maxFilter)
		f.Q, f.Type = "", ""
	}
	return f, err
}

// query is f as query parameters, with page and sort as given.
func (f sbomFilter) query(page int, sort string, desc bool) string {
	v := url.Values{}
	if f.Q != "" {
		v.Set("q", f.Q)
	}
	if f.Type != "" {
		v.Set("type", f.Type)
	}
	if sort != "name" {
		v.Set("sort", sort)
	}
	if desc {
		v.Set("dir", "desc")
	}
	if page > 1 {
		v.Set("page", strconv.Itoa(page))
	}
	if f.Per != sbomPerPage {
		v.Set("per", strconv.Itoa(f.Per))
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// column is a table header: its sort link and whether the table is
// sorted by it (Arrow).
type column struct {
	Name, Link, Arrow string
}

// componentRow is one component as the table shows it, cut to maxCell.
type componentRow struct {
	Name, Version, Type, Licenses, PURL string
}

// table is one page of the components of an SBOM that f keeps, sorted as f
// says.
type table struct {
	Total, Matched int
	Page, Pages    int
	Rows           []componentRow
	Columns        []column
	Types          []string
	Prev, Next     string // links, "" at either end
}

// newTable filters e's components, in the order of f's column, and cuts
// them to one page: a walk of the order e keeps for the column.
func newTable(e *sbomEntry, f sbomFilter) table {
	t := table{Total: len(e.rows), Types: e.types}
	q := strings.ToLower(f.Q)
	order := e.order(f.Sort)
	lo := (max(f.Page, 1) - 1) * f.Per
	var page []*compRow
	var last []*compRow // the last page's rows, should f.Page be past it
	for k := range order {
		i := order[k]
		if f.Desc {
			i = order[len(order)-1-k]
		}
		c := &e.rows[i]
		if f.Type != "" && c.Type != f.Type || q != "" && !strings.Contains(c.lower, q) {
			continue
		}
		if t.Matched%f.Per == 0 {
			last = last[:0]
		}
		last = append(last, c)
		if t.Matched >= lo && t.Matched < lo+f.Per {
			page = append(page, c)
		}
		t.Matched++
	}
	t.Pages = max(1, (t.Matched+f.Per-1)/f.Per)
	t.Page = min(max(f.Page, 1), t.Pages)
	if len(page) == 0 {
		page = last
	}
	for _, c := range page {
		t.Rows = append(t.Rows, componentRow{Name: clip(c.Name), Version: clip(c.Version), Type: clip(c.Type), Licenses: clip(strings.Join(c.Licenses, ", ")), PURL: clip(c.PURL)})
	}
	for _, col := range sbomColumns {
		h := column{Name: col, Link: f.query(1, col, col == f.Sort && !f.Desc)}
		if col == f.Sort {
			h.Arrow = map[bool]string{false: "▲", true: "▼"}[f.Desc]
		}
		t.Columns = append(t.Columns, h)
	}
	if t.Page > 1 {
		t.Prev = f.query(t.Page-1, f.Sort, f.Desc)
		if t.Prev == "" {
			t.Prev = "?"
		}
	}
	if t.Page < t.Pages {
		t.Next = f.query(t.Page+1, f.Sort, f.Desc)
	}
	return t
}

// compRow is a component with what sorting and filtering it take, worked
// out once: its ecosystem, its version parsed in that ecosystem's order
// (nil if it has none or the version is not one of it), its name and
// package URL in lower case.
type compRow struct {
	bom.Component
	eco   string
	ver   semantic.Version
	lower string
}

func newCompRow(c bom.Component) compRow {
	r := compRow{Component: c, eco: bom.Ecosystem(c), lower: strings.ToLower(c.Name + "\x00" + c.PURL)}
	if r.eco != "" && c.Version != "" {
		if v, err := semantic.Parse(c.Version, r.eco); err == nil {
			r.ver = v
		}
	}
	return r
}

// componentOrder compares components by column, then by name, version
// and package URL. Versions of one ecosystem compare in its own order
// (osv-scalibr's semantic, as bom.Compare); others, and versions it
// cannot read, as text.
func componentOrder(col string) func(a, b *compRow) int {
	rest := func(a, b *compRow) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), compareVersions(a, b), strings.Compare(a.PURL, b.PURL))
	}
	switch col {
	case "version":
		return func(a, b *compRow) int { return cmp.Or(compareVersions(a, b), rest(a, b)) }
	case "type":
		return func(a, b *compRow) int { return cmp.Or(strings.Compare(a.Type, b.Type), rest(a, b)) }
	case "licenses":
		return func(a, b *compRow) int { return cmp.Or(slices.Compare(a.Licenses, b.Licenses), rest(a, b)) }
	case "purl":
		return func(a, b *compRow) int { return cmp.Or(strings.Compare(a.PURL, b.PURL), rest(a, b)) }
	}
	return rest
}

func compareVersions(a, b *compRow) int {
	if a.Version == b.Version {
		return 0
	}
	if a.ver != nil && b.ver != nil && a.eco == b.eco {
		if n, err := a.ver.Compare(b.ver); err == nil {
			return n
		}
	}
	return strings.Compare(a.Version, b.Version)
}

// clip cuts s to maxCell bytes (at a rune's start), marking the cut.
func clip(s string) string {
	if len(s) <= maxCell {
		return s
	}
	n := maxCell
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// sbomView is the page of one SBOM.
type sbomView struct {
	view
	Namespace, Name, Version string
	Image, Platform, Format  string
	Digest, Document         string // the referrer manifest's, the document's
	Size                     int64  // the document's
	Filter                   sbomFilter
	FilterError              string
	Table                    table
	Base                     string // the page's path
}

// sbomPage shows the components of the SBOM whose referrer manifest is
// {digest}, of the Package {namespace}/{name}.
func (s *Server) sbomPage(w http.ResponseWriter, r *http.Request) {
	a, p, d, ok := s.sbomRequest(w, r)
	if !ok {
		return
	}
	e, err := s.sbomEntry(r.Context(), a, p, d)
	if err != nil {
		s.sbomFail(w, r, err)
		return
	}
	v := &sbomView{view: s.view(r, "SBOM of "+e.image), Namespace: p.Namespace, Name: p.Name, Version: p.Status.Version,
		Image: e.image, Platform: e.platform, Format: e.format, Digest: d.String(), Document: e.doc.String(), Size: e.size,
		Base: r.URL.Path}
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		v.FilterError = err.Error()
	}
	v.Filter, v.Table = f, newTable(e, f)
	s.render(w, r, "sbom", v)
}

// sbomDocument serves the SBOM document as the package carries it: its
// media type, its bytes (checked against its digest when read), a file
// name made of the image's and the platform's.
func (s *Server) sbomDocument(w http.ResponseWriter, r *http.Request) {
	a, p, d, ok := s.sbomRequest(w, r)
	if !ok {
		return
	}
	doc, err := s.readSBOM(r.Context(), a, p, d)
	if err != nil {
		s.sbomFail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", doc.ArtifactType)
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", sbomFileName(doc.Image, doc.Platform, doc.ArtifactType)))
	h.Set("Content-Length", strconv.Itoa(len(doc.Data)))
	h.Set("ETag", `"`+digest.FromBytes(doc.Data).String()+`"`)
	_, _ = w.Write(doc.Data)
}

// sbomFileName is a file name for an SBOM of image on platform: letters,
// digits, dots, dashes and underscores only, at most 128 bytes and an
// extension of its format.
func sbomFileName(image, platform, artifactType string) string {
	if i := strings.LastIndexByte(image, '/'); i >= 0 {
		image = image[i+1:]
	}
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, image+"-"+platform)
	base = strings.Trim(base, ".-")
	if len(base) > 100 {
		base = base[:100]
	}
	if base == "" {
		base = "sbom"
	}
	ext := ".spdx.json"
	switch artifactType {
	case definition.ArtifactTypeCycloneDX:
		ext = ".cdx.json"
	case definition.ArtifactTypeSyft:
		ext = ".syft.json"
	}
	return base + ext
}

// errNoSuchSBOM: the package carries no SBOM of that digest.
var errNoSuchSBOM = errors.New("no such SBOM in the package")

// sbomFail answers an SBOM request that failed: 404 for an SBOM the
// package does not carry, 422 for one the reader refuses (malformed, over
// its bounds), else as fail does.
func (s *Server) sbomFail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errNoSuchSBOM), errors.Is(err, artifact.ErrSBOMNotCarried):
		s.refuse(w, r, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, bom.ErrFormat):
		s.refuse(w, r, http.StatusUnprocessableEntity, err.Error())
		return
	}
	s.fail(w, r, err)
}

// sbomRequest reads the request's Package (as the user) and SBOM digest;
// if it cannot, the request has been answered.
func (s *Server) sbomRequest(w http.ResponseWriter, r *http.Request) (*actor, *v1alpha1.Package, digest.Digest, bool) {
	d, err := digest.Parse(r.PathValue("digest"))
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("not a digest: %.80q", r.PathValue("digest")))
		return nil, nil, "", false
	}
	a, ok := s.clusterActor(w, r)
	if !ok {
		return nil, nil, "", false
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	var p v1alpha1.Package
	if err := a.pc.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		s.fail(w, r, fmt.Errorf("Package %s/%s: %w", ns, name, err))
		return nil, nil, "", false
	}
	return a, &p, d, true
}

// readSBOM reads the document of SBOM d of p from the in-cluster
// registry, with a's credentials: only an SBOM of the package's own graph,
// checked against its digest.
func (s *Server) readSBOM(ctx context.Context, a *actor, p *v1alpha1.Package, d digest.Digest) (*artifact.SBOMDocument, error) {
	root := packageDigest(p)
	if root == "" {
		return nil, errors.New("the Package's digest is not resolved yet")
	}
	reg, _, err := a.registry(ctx, s.opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("the in-cluster registry: %w", err)
	}
	repo, err := reg.Repository(ctx, p.Spec.Repository)
	if err != nil {
		return nil, err
	}
	cfg, _, err := artifact.ReadConfig(ctx, repo, root)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Components {
		for _, img := range c.Images {
			for _, sb := range img.SBOMs {
				if sb.Digest != d {
					continue
				}
				docs, err := artifact.ReadSBOMs(ctx, repo, root, img.Ref, sb.Platform)
				if err != nil {
					return nil, err
				}
				for i := range docs {
					if docs[i].Digest == d {
						return &docs[i], nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("%s/%s: %s: %w", p.Namespace, p.Name, d, errNoSuchSBOM)
}

// packageDigest is the root digest of p: the one it resolved, else the
// one it asks for.
func packageDigest(p *v1alpha1.Package) string {
	if p.Status.Digest != "" {
		return p.Status.Digest
	}
	return p.Spec.Digest
}

// readComponents reads the components of an SBOM document, bounded as
// bom.DefaultLimits says.
func readComponents(doc *artifact.SBOMDocument) ([]bom.Component, error) {
	comps, err := bom.Read(bytes.NewReader(doc.Data), doc.ArtifactType, bom.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("SBOM %s of %s (%s): %w", doc.Digest, doc.Image, doc.Platform, err)
	}
	return comps, nil
}
