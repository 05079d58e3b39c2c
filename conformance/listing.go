package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// The catalog (GET /v2/_catalog) is not part of the OCI spec, but crane
// catalog, oras repo ls and regctl repo ls use it: a registry that offers it
// must list every repository, in pages clients can follow.

// catalogPages lists the catalog from first, following Link headers (or
// last= when a full page has none). It returns skip when the registry does
// not offer the catalog.
func catalogPages(ctx context.Context, e *env, first string, pageSize int) ([]string, error) {
	var all []string
	next := first
	for page := 0; next != ""; page++ {
		if page > 10000 {
			return nil, fmt.Errorf("catalog paging does not end after %d pages", page)
		}
		resp, err := e.get(ctx, http.MethodGet, next, nil)
		if err != nil {
			return nil, err
		}
		if page == 0 && (resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden || resp.Status == http.StatusNotFound || resp.Status == http.StatusMethodNotAllowed) {
			return nil, skipf("GET %s: %d, the registry does not offer the catalog (not in the OCI spec)", next, resp.Status)
		}
		if err := wantStatus("GET "+next, resp, http.StatusOK); err != nil {
			return nil, err
		}
		var body struct {
			Repositories []string `json:"repositories"`
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			return nil, fmt.Errorf("GET %s: body is not a repository list: %w", next, err)
		}
		all = append(all, body.Repositories...)
		link, err := nextLink(resp)
		if err != nil {
			return nil, err
		}
		switch {
		case link != "":
			next = link
		case pageSize > 0 && len(body.Repositories) == pageSize:
			next = fmt.Sprintf("/v2/_catalog?n=%d&last=%s", pageSize, body.Repositories[len(body.Repositories)-1])
		default:
			next = ""
		}
	}
	return all, nil
}

// catalogRepos pushes a manifest to a few repositories of this run and
// returns their names, sorted.
func catalogRepos(ctx context.Context, e *env) ([]string, error) {
	repos := []string{e.repo("catalog-a"), e.repo("catalog-b/nested"), e.repo("catalog-c")}
	m := imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"catalog": e.runID})
	for _, r := range repos {
		if err := e.pushImage(ctx, r, "v1", m, emptyConfig()); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	return repos, nil
}

func wantListed(all, want []string) error {
	if !slices.IsSorted(all) {
		return fmt.Errorf("catalog is not in lexical order")
	}
	for _, r := range want {
		if !slices.Contains(all, r) {
			return fmt.Errorf("catalog of %d repositories lacks %s", len(all), r)
		}
	}
	return nil
}

var catalogChecks = []check{
	def(Discovery, "catalog", "Docker Registry HTTP API V2: Listing Repositories (GET /v2/_catalog)", "GET /v2/_catalog, plain and with n=1000 as crane asks, lists every repository (following Link headers)",
		func(ctx context.Context, e *env) error {
			repos, err := catalogRepos(ctx, e)
			if err != nil {
				return err
			}
			for _, first := range []string{"/v2/_catalog", "/v2/_catalog?n=1000", "/v2/_catalog?n=100000"} {
				all, err := catalogPages(ctx, e, first, 0)
				if err != nil {
					return err
				}
				if err := wantListed(all, repos); err != nil {
					return fmt.Errorf("from %s: %w", first, err)
				}
			}
			return nil
		}),
	def(Discovery, "catalog-paginate", "Docker Registry HTTP API V2: Listing Repositories, Pagination", "paging the catalog with n=2 through Link headers (or last=) lists every repository once, in order",
		func(ctx context.Context, e *env) error {
			repos, err := catalogRepos(ctx, e)
			if err != nil {
				return err
			}
			// Start just before this run's repositories, so a big registry
			// is not walked two at a time.
			all, err := catalogPages(ctx, e, "/v2/_catalog?n=2&last="+e.prefix, 2)
			if err != nil {
				return err
			}
			if err := wantListed(all, repos); err != nil {
				return err
			}
			for i := 1; i < len(all); i++ {
				if all[i] == all[i-1] {
					return fmt.Errorf("catalog pages list %s twice", all[i])
				}
			}
			return nil
		}),
}
