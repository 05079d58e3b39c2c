package artifact

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/ferrypkg/ferry/internal/unreachable"
)

// Every listing ferry asks of a registry — its repositories (the catalog),
// a repository's tags, a manifest's referrers — goes through ListRepositories,
// ListTags or ListReferrers. A registry answers them in pages, each naming
// the next (a Link header); these count the pages and the entries and stop
// past MaxListPages or MaxListEntries, so that a registry answering endless
// pages costs a refusal, not the machine. (oras-go bounds each page's bytes:
// remote.Repository.MaxMetadataBytes, 4 MiB by default.)

// ErrListLimit means a registry's listing went past MaxListPages or
// MaxListEntries; a ListLimitError says which listing.
var ErrListLimit = errors.New("the registry's listing goes past ferry's limit")

// ListLimitError is a listing refused past MaxListPages or MaxListEntries.
type ListLimitError struct {
	// What is the listing: "the repositories of HOST", "the tags of
	// HOST/REPO", "the referrers of DIGEST in HOST/REPO".
	What string
	// Pages and Entries are what the registry had answered when it was
	// refused.
	Pages, Entries int
}

func (e *ListLimitError) Error() string {
	if e.Pages > MaxListPages {
		return fmt.Sprintf("listing %s: the registry answered more than %d pages", e.What, MaxListPages)
	}
	return fmt.Sprintf("listing %s: the registry answered more than %d entries", e.What, MaxListEntries)
}

func (e *ListLimitError) Unwrap() error { return ErrListLimit }

// pager counts the pages and entries of one listing.
type pager struct {
	what           string
	pages, entries int
}

// page counts a page of n entries, refusing it past the limits.
func (p *pager) page(n int) error {
	p.pages++
	p.entries += n
	if p.pages > MaxListPages || p.entries > MaxListEntries {
		return &ListLimitError{What: p.what, Pages: p.pages, Entries: p.entries}
	}
	return nil
}

// ListRepositories calls fn with each page of the names of reg's
// repositories (GET /v2/_catalog), from the first; past MaxListPages pages
// or MaxListEntries names it stops with a ListLimitError. An error fn
// returns ends the listing and is returned.
func ListRepositories(ctx context.Context, reg registry.Registry, fn func(repos []string) error) error {
	p := &pager{what: "the repositories of " + registryName(reg)}
	return reg.Repositories(ctx, "", func(repos []string) error {
		if err := p.page(len(repos)); err != nil {
			return err
		}
		return fn(repos)
	})
}

// ListTags calls fn with each page of repo's tags, from the first; past
// MaxListPages pages or MaxListEntries tags it stops with a
// ListLimitError. An error fn returns ends the listing and is returned.
// A repository the registry does not know (404 NAME_UNKNOWN) has no tags:
// distribution answers so for a repository its catalog still lists once
// every tag of it is gone (a package removed and its garbage collected).
func ListTags(ctx context.Context, repo registry.TagLister, fn func(tags []string) error) error {
	p := &pager{what: "the tags of " + repositoryName(repo)}
	err := repo.Tags(ctx, "", func(tags []string) error {
		if err := p.page(len(tags)); err != nil {
			return err
		}
		return fn(tags)
	})
	if nameUnknown(err) {
		return nil
	}
	return err
}

// nameUnknown says whether err is a registry's 404 NAME_UNKNOWN.
func nameUnknown(err error) bool {
	var resp *errcode.ErrorResponse
	if !errors.As(err, &resp) || resp.StatusCode != http.StatusNotFound {
		return false
	}
	for _, e := range resp.Errors {
		if e.Code == errcode.ErrorCodeNameUnknown {
			return true
		}
	}
	return false
}

// ListReferrers calls fn with each page of the manifests naming subject
// in repo (the referrers API, or the referrers tag schema where the
// registry has no such API), those of artifactType only when it is set;
// past MaxListPages pages or MaxListEntries referrers it stops with a
// ListLimitError. An error fn returns ends the listing and is returned.
func ListReferrers(ctx context.Context, repo registry.ReferrerLister, subject ocispec.Descriptor, artifactType string, fn func(referrers []ocispec.Descriptor) error) error {
	p := &pager{what: fmt.Sprintf("the referrers of %s in %s", subject.Digest, repositoryName(repo))}
	return repo.Referrers(ctx, subject, artifactType, func(refs []ocispec.Descriptor) error {
		if err := p.page(len(refs)); err != nil {
			return err
		}
		return fn(refs)
	})
}

// ListFailed is err, the failure of a listing, with what says what was
// listed unless err (a ListLimitError) says it already.
func ListFailed(what string, err error) error {
	if errors.Is(err, ErrListLimit) {
		return err
	}
	return fmt.Errorf("%s: %w", what, unreachable.Said(err))
}

// registryName names a registry in messages: its host, when known.
func registryName(reg any) string {
	if r, ok := reg.(*remote.Registry); ok {
		return r.Reference.Registry
	}
	return "the registry"
}

// repositoryName names a repository in messages: host/repository, when
// known.
func repositoryName(repo any) string {
	if r, ok := repo.(*remote.Repository); ok {
		return r.Reference.Registry + "/" + r.Reference.Repository
	}
	return "the repository"
}

// Referrers is oras-go's registry.Referrers, bounded: the manifests naming
// desc in store, of artifactType only when it is set — listed with
// ListReferrers where store lists referrers (a registry), else found among
// its predecessors (a layout store, memory).
func Referrers(ctx context.Context, store content.ReadOnlyGraphStorage, desc ocispec.Descriptor, artifactType string) ([]ocispec.Descriptor, error) {
	lister, ok := store.(registry.ReferrerLister)
	if !ok {
		return registry.Referrers(ctx, store, desc, artifactType)
	}
	var out []ocispec.Descriptor
	err := ListReferrers(ctx, lister, desc, artifactType, func(refs []ocispec.Descriptor) error {
		out = append(out, refs...)
		return nil
	})
	return out, err
}
