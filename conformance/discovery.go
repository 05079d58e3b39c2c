package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// discoveryTags are pushed out of order; the spec wants them listed in
// lexical order.
var discoveryTags = []string{"delta", "alpha", "echo", "charlie", "bravo", "foxtrot", "golf"}

// discovery is the content the discovery checks read.
type discovery struct {
	repo      string
	subject   blob   // the manifest the referrers refer to
	referrers []blob // signature (artifactType), sbom (config media type only), index
	filterBy  string // artifactType of referrers[0]
}

func (e *env) discovery(ctx context.Context) (*discovery, error) {
	if e.discReady {
		return e.disc, e.discErr
	}
	e.discReady = true
	d := &discovery{repo: e.repo("discovery")}
	d.subject = imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"role": "subject", "run": e.runID})
	if err := e.pushBlob(ctx, d.repo, emptyConfig()); err != nil {
		e.discErr = fmt.Errorf("setup: %w", err)
		return nil, e.discErr
	}
	for _, tag := range discoveryTags {
		if _, err := e.pushManifest(ctx, d.repo, tag, d.subject); err != nil {
			e.discErr = fmt.Errorf("setup: %w", err)
			return nil, e.discErr
		}
	}
	subject := d.subject.desc
	subject.ArtifactType = ""
	sig := imageManifest(emptyConfig(), nil, "application/vnd.ferry.conformance.signature.v1", &subject,
		map[string]string{"org.opencontainers.image.created": "2024-01-01T00:00:00Z", "kind": "signature"})
	sbomConfig := newBlob("application/vnd.ferry.conformance.sbom.config.v1+json", []byte(`{"format":"spdx"}`))
	sbom := imageManifest(sbomConfig, nil, "", &subject, map[string]string{"kind": "sbom"})
	sbom.desc.ArtifactType = sbomConfig.desc.MediaType // spec: artifactType falls back to the config media type
	idx := imageIndex([]ocispec.Descriptor{}, "", &subject, map[string]string{"kind": "index"})
	if err := e.pushBlob(ctx, d.repo, sbomConfig); err != nil {
		e.discErr = fmt.Errorf("setup: %w", err)
		return nil, e.discErr
	}
	for _, r := range []blob{sig, sbom, idx} {
		if _, err := e.pushManifest(ctx, d.repo, r.desc.Digest.String(), r); err != nil {
			e.discErr = fmt.Errorf("setup: %w", err)
			return nil, e.discErr
		}
		r.desc.Annotations = referrerAnnotations(r)
		d.referrers = append(d.referrers, r)
	}
	d.filterBy = sig.desc.ArtifactType
	e.disc = d
	return d, nil
}

func referrerAnnotations(b blob) map[string]string {
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	_ = json.Unmarshal(b.data, &m)
	return m.Annotations
}

func withDiscovery(run func(context.Context, *env, *discovery) error) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		d, err := e.discovery(ctx)
		if err != nil {
			return err
		}
		return run(ctx, e, d)
	}
}

type tagList struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

func listTags(ctx context.Context, e *env, repo, query string) (tagList, *response, error) {
	resp, err := e.get(ctx, http.MethodGet, "/v2/"+repo+"/tags/list"+query, nil)
	if err != nil {
		return tagList{}, nil, err
	}
	what := "GET tags/list" + query
	if err := wantStatus(what, resp, http.StatusOK); err != nil {
		return tagList{}, resp, err
	}
	var tl tagList
	if err := json.Unmarshal(resp.Body, &tl); err != nil {
		return tagList{}, resp, fmt.Errorf("%s: body is not a tag list: %w", what, err)
	}
	return tl, resp, nil
}

func sortedTags() []string {
	s := slices.Clone(discoveryTags)
	slices.Sort(s)
	return s
}

// nextLink returns the target of a Link rel="next" header, or "".
func nextLink(resp *response) (string, error) {
	h := resp.Header.Get("Link")
	if h == "" {
		return "", nil
	}
	target, params, _ := strings.Cut(h, ";")
	target = strings.Trim(strings.TrimSpace(target), "<>")
	if !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
		return "", fmt.Errorf("Link header %q has no rel=\"next\"", h)
	}
	u, err := resp.URL.Parse(target)
	if err != nil {
		return "", fmt.Errorf("Link header %q: %w", h, err)
	}
	return u.String(), nil
}

var discoveryChecks = []check{
	def(Discovery, "tags-list", "Listing Tags (end-8a)", "GET tags/list: 200, the repository name and every tag in lexical order",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			tl, _, err := listTags(ctx, e, d.repo, "")
			if err != nil {
				return err
			}
			if tl.Name != d.repo {
				return fmt.Errorf("tag list name %q, want %q", tl.Name, d.repo)
			}
			if !slices.Equal(tl.Tags, sortedTags()) {
				return fmt.Errorf("tags %v, want %v", tl.Tags, sortedTags())
			}
			return nil
		})),
	def(Discovery, "tags-n", "Listing Tags (end-8b)", "GET tags/list?n=3: exactly the first 3 tags in lexical order",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			tl, resp, err := listTags(ctx, e, d.repo, "?n=3")
			if err != nil {
				return err
			}
			want := sortedTags()[:3]
			if len(tl.Tags) < 3 && resp.Header.Get("Link") != "" && slices.Equal(tl.Tags, want[:len(tl.Tags)]) {
				return passNote("returned %d of 3 tags with a Link header (spec-permitted)", len(tl.Tags))
			}
			if !slices.Equal(tl.Tags, want) {
				return fmt.Errorf("n=3: tags %v, want %v", tl.Tags, want)
			}
			return nil
		})),
	def(Discovery, "tags-n-last", "Listing Tags (end-8b)", "GET tags/list?n=2&last=<tag>: the 2 tags after <tag>, exclusive",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			all := sortedTags()
			tl, _, err := listTags(ctx, e, d.repo, "?n=2&last="+url.QueryEscape(all[1]))
			if err != nil {
				return err
			}
			if want := all[2:4]; !slices.Equal(tl.Tags, want) {
				return fmt.Errorf("n=2&last=%s: tags %v, want %v", all[1], tl.Tags, want)
			}
			return nil
		})),
	def(Discovery, "tags-paginate", "Listing Tags (end-8b; Link rel=\"next\")", "paging with n=2 through Link headers (or last=) lists every tag once, in order",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			var got []string
			next := "/v2/" + d.repo + "/tags/list?n=2"
			for page := 0; next != ""; page++ {
				if page > len(discoveryTags)+2 {
					return fmt.Errorf("pagination does not end: %v so far", got)
				}
				resp, err := e.get(ctx, http.MethodGet, next, nil)
				if err != nil {
					return err
				}
				if err := wantStatus("GET "+next, resp, http.StatusOK); err != nil {
					return err
				}
				var tl tagList
				if err := json.Unmarshal(resp.Body, &tl); err != nil {
					return fmt.Errorf("page %d: %w", page, err)
				}
				got = append(got, tl.Tags...)
				link, err := nextLink(resp)
				if err != nil {
					return err
				}
				switch {
				case link != "":
					next = link
				case len(tl.Tags) == 2:
					next = "/v2/" + d.repo + "/tags/list?n=2&last=" + url.QueryEscape(tl.Tags[1])
				default:
					next = ""
				}
			}
			if !slices.Equal(got, sortedTags()) {
				return fmt.Errorf("paged tags %v, want %v", got, sortedTags())
			}
			return nil
		})),
	def(Discovery, "tags-n-zero", "Listing Tags (end-8b)", "GET tags/list?n=0: an empty list and no Link header",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			tl, resp, err := listTags(ctx, e, d.repo, "?n=0")
			if err != nil {
				return err
			}
			if len(tl.Tags) != 0 {
				return fmt.Errorf("n=0: %d tags, want none", len(tl.Tags))
			}
			if l := resp.Header.Get("Link"); l != "" {
				return fmt.Errorf("n=0: Link header %q, want none", l)
			}
			return nil
		})),
	def(Discovery, "referrers-list", "Listing Referrers (end-12a)", "GET referrers: 200, an image index listing each referrer with mediaType, size, artifactType (or the config media type) and annotations",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			idx, _, err := getReferrers(ctx, e, d.repo, d.subject.desc.Digest.String(), "")
			if err != nil {
				return err
			}
			return wantDescriptors(idx.Manifests, d.referrers)
		})),
	def(Discovery, "referrers-filter", "Listing Referrers (end-12b)", "GET referrers?artifactType=: only matching referrers, with OCI-Filters-Applied: artifactType",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			idx, resp, err := getReferrers(ctx, e, d.repo, d.subject.desc.Digest.String(), "?artifactType="+url.QueryEscape(d.filterBy))
			if err != nil {
				return err
			}
			if !strings.Contains(resp.Header.Get("OCI-Filters-Applied"), "artifactType") {
				if err := wantDescriptors(idx.Manifests, d.referrers); err != nil {
					return fmt.Errorf("no OCI-Filters-Applied header, so the list must be unfiltered: %w", err)
				}
				return passNote("artifactType filter not applied (SHOULD); the full list came back unfiltered")
			}
			return wantDescriptors(idx.Manifests, d.referrers[:1])
		})),
	def(Discovery, "referrers-empty", "Listing Referrers (end-12a)", "GET referrers of a digest without referrers: 200 with an empty manifests list, never 404",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			idx, _, err := getReferrers(ctx, e, d.repo, d.referrers[0].desc.Digest.String(), "")
			if err != nil {
				return err
			}
			if len(idx.Manifests) != 0 {
				return fmt.Errorf("%d referrers, want none", len(idx.Manifests))
			}
			return nil
		})),
	def(Discovery, "referrers-bad-digest", "Listing Referrers (end-12a: 400)", "GET referrers with a malformed digest: 400",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			resp, err := e.get(ctx, http.MethodGet, "/v2/"+d.repo+"/referrers/sha256:not-a-digest", nil)
			if err != nil {
				return err
			}
			return wantStatus("GET referrers/sha256:not-a-digest", resp, http.StatusBadRequest)
		})),
	def(Discovery, "referrers-tag-schema", "Backwards Compatibility: Referrers Tag Schema", "an image index pushed to the tag <alg>-<ref> is stored and served byte for byte",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			return pushTagSchema(ctx, e, d)
		})),
	def(Discovery, "referrers-or-tag-schema", "Listing Referrers; Backwards Compatibility: Unavailable Referrers API", "referrers can be found, through the referrers API or the tag-schema fallback",
		withDiscovery(func(ctx context.Context, e *env, d *discovery) error {
			idx, _, apiErr := getReferrers(ctx, e, d.repo, d.subject.desc.Digest.String(), "")
			if apiErr == nil {
				if apiErr = wantDescriptors(idx.Manifests, d.referrers); apiErr == nil {
					return passNote("referrers API")
				}
			}
			if err := pushTagSchema(ctx, e, d); err != nil {
				return fmt.Errorf("referrers API: %v; tag schema: %w", apiErr, err)
			}
			return passNote("tag-schema fallback (referrers API: %v)", apiErr)
		})),
}

func tagSchemaTag(dgst string) string { return strings.Replace(dgst, ":", "-", 1) }

func pushTagSchema(ctx context.Context, e *env, d *discovery) error {
	var descs []ocispec.Descriptor
	for _, r := range d.referrers {
		descs = append(descs, r.desc)
	}
	idx := imageIndex(descs, "", nil, nil)
	tag := tagSchemaTag(d.subject.desc.Digest.String())
	if _, err := e.pushManifest(ctx, d.repo, tag, idx); err != nil {
		return err
	}
	return getManifest(ctx, e, d.repo, tag, idx)
}

func getReferrers(ctx context.Context, e *env, repo, dgst, query string) (ocispec.Index, *response, error) {
	path := "/v2/" + repo + "/referrers/" + dgst + query
	resp, err := e.get(ctx, http.MethodGet, path, nil)
	if err != nil {
		return ocispec.Index{}, nil, err
	}
	what := "GET referrers" + query
	if resp.Status == http.StatusNotFound {
		return ocispec.Index{}, resp, fmt.Errorf("%s: 404, the referrers API is not implemented", what)
	}
	if err := wantStatus(what, resp, http.StatusOK); err != nil {
		return ocispec.Index{}, resp, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != ocispec.MediaTypeImageIndex {
		return ocispec.Index{}, resp, fmt.Errorf("%s: Content-Type %q, want %q", what, ct, ocispec.MediaTypeImageIndex)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(resp.Body, &idx); err != nil {
		return ocispec.Index{}, resp, fmt.Errorf("%s: body is not an image index: %w", what, err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != ocispec.MediaTypeImageIndex || idx.Manifests == nil {
		return ocispec.Index{}, resp, fmt.Errorf("%s: index has schemaVersion %d, mediaType %q, manifests %v; want 2, %q and a list", what, idx.SchemaVersion, idx.MediaType, idx.Manifests, ocispec.MediaTypeImageIndex)
	}
	return idx, resp, nil
}

// wantDescriptors checks got lists exactly the referrers in want.
func wantDescriptors(got []ocispec.Descriptor, want []blob) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d referrers, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(g ocispec.Descriptor) bool { return g.Digest == w.desc.Digest })
		if i < 0 {
			return fmt.Errorf("referrer %s missing", w.desc.Digest)
		}
		g := got[i]
		switch {
		case g.MediaType != w.desc.MediaType:
			return fmt.Errorf("referrer %s: mediaType %q, want %q", g.Digest, g.MediaType, w.desc.MediaType)
		case g.Size != w.desc.Size:
			return fmt.Errorf("referrer %s: size %d, want %d", g.Digest, g.Size, w.desc.Size)
		case g.ArtifactType != w.desc.ArtifactType:
			return fmt.Errorf("referrer %s: artifactType %q, want %q", g.Digest, g.ArtifactType, w.desc.ArtifactType)
		}
		for k, v := range w.desc.Annotations {
			if g.Annotations[k] != v {
				return fmt.Errorf("referrer %s: annotation %s=%q, want %q", g.Digest, k, g.Annotations[k], v)
			}
		}
	}
	return nil
}
