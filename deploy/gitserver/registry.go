package gitserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact/gitrepo"
)

// Entry is one deployed repository: what its package recorded, and where
// its git artifact (gitrepo.Build's) is in the registry.
type Entry struct {
	// URL is the repository's original URL; it is served at
	// gitrepo.Key(URL).
	URL string `json:"url"`
	// Ref is the carried ref (refs/heads/main, refs/tags/v1); empty for a
	// bare commit.
	Ref string `json:"ref,omitempty"`
	// Commit is the recorded commit (40 hex).
	Commit string `json:"commit"`
	// Repository is the artifact's registry repository (org/fleet).
	Repository string `json:"repository"`
	// Digest is the artifact's manifest digest.
	Digest digest.Digest `json:"digest"`
	// Size is the manifest's size, when known (ferry.json records it):
	// the manifest is then fetched without resolving its digest first.
	Size int64 `json:"size,omitempty"`
}

// Entries lists the repositories deployed. It is where the caller says
// which repositories are served (a file, the deploy records); it is
// called on every lookup, so it should be cheap.
type Entries func(ctx context.Context) ([]Entry, error)

// Opener opens a registry repository for reading, such as an oras-go
// remote.Repository.
type Opener func(ctx context.Context, repository string) (oras.ReadOnlyTarget, error)

// FromRegistry is a Lookup over the repositories entries lists, whose
// artifacts open reads: the manifest is fetched by its digest and checked
// to be a git artifact of the entry's URL at its commit, with a bundle
// layer (a repository carried without its history is not found: only its
// OCI artifact is served, by the registry); the bundle is then read by
// its digest. Manifests are remembered by digest (they cannot change).
func FromRegistry(entries Entries, open Opener) Lookup {
	l := &registryLookup{entries: entries, open: open, bundles: map[digest.Digest]ocispec.Descriptor{}}
	return l.lookup
}

type registryLookup struct {
	entries Entries
	open    Opener
	mu      sync.Mutex
	bundles map[digest.Digest]ocispec.Descriptor // manifest → its checked bundle layer
}

func (l *registryLookup) lookup(ctx context.Context, key string) (*Repo, error) {
	list, err := l.entries(ctx)
	if err != nil {
		return nil, fmt.Errorf("deployed git repositories: %w", err)
	}
	var found *Entry
	for i, e := range list {
		if gitrepo.Key(e.URL) != key {
			continue
		}
		if found != nil && (found.Commit != e.Commit || found.Ref != e.Ref || found.Digest != e.Digest) {
			return nil, fmt.Errorf("%s: deployed twice, at %s and at %s", key, found.Commit, e.Commit)
		}
		found = &list[i]
	}
	if found == nil {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	e := *found
	if err := e.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("%s: manifest digest %.80q: %w", key, e.Digest, err)
	}
	target, err := l.open(ctx, e.Repository)
	if err != nil {
		return nil, fmt.Errorf("%s: registry repository %s: %w", key, e.Repository, err)
	}
	bundle, err := l.bundleLayer(ctx, target, e, key)
	if err != nil {
		return nil, err
	}
	return &Repo{
		Key: key, URL: e.URL, Ref: e.Ref, Commit: e.Commit, BundleDigest: bundle.Digest,
		Bundle: func(ctx context.Context) (io.ReadCloser, error) {
			return target.Fetch(ctx, bundle)
		},
	}, nil
}

// bundleLayer fetches e's manifest, checks it, and returns its bundle
// layer.
func (l *registryLookup) bundleLayer(ctx context.Context, target oras.ReadOnlyTarget, e Entry, key string) (ocispec.Descriptor, error) {
	l.mu.Lock()
	d, ok := l.bundles[e.Digest]
	l.mu.Unlock()
	if ok {
		return d, nil
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: e.Digest, Size: e.Size}
	if e.Size <= 0 {
		var err error
		if desc, err = target.Resolve(ctx, e.Digest.String()); err != nil {
			return d, fmt.Errorf("%s: manifest %s in %s: %w", key, e.Digest, e.Repository, err)
		}
		if desc.Digest != e.Digest {
			return d, fmt.Errorf("%s: %s resolved to %s", key, e.Digest, desc.Digest)
		}
	}
	b, err := content.FetchAll(ctx, target, desc) // digest and size checked
	if err != nil {
		return d, fmt.Errorf("%s: manifest %s: %w", key, e.Digest, err)
	}
	d, err = checkManifest(b, e, key)
	if err != nil {
		return d, err
	}
	l.mu.Lock()
	l.bundles[e.Digest] = d
	l.mu.Unlock()
	return d, nil
}

// checkManifest checks that b is gitrepo's artifact of e (Flux's config
// and content media types, the entry's URL and commit in its annotations)
// and returns its bundle layer.
func checkManifest(b []byte, e Entry, key string) (ocispec.Descriptor, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s: manifest %s: %w", key, e.Digest, err)
	}
	bad := func(format string, a ...any) (ocispec.Descriptor, error) {
		return ocispec.Descriptor{}, fmt.Errorf("%s: manifest %s is not a git artifact: "+format, append([]any{key, e.Digest}, a...)...)
	}
	switch {
	case m.MediaType != ocispec.MediaTypeImageManifest:
		return bad("media type %q", m.MediaType)
	case m.Config.MediaType != gitrepo.ConfigMediaType:
		return bad("config media type %q", m.Config.MediaType)
	case len(m.Layers) == 0 || m.Layers[0].MediaType != gitrepo.ContentMediaType:
		return bad("first layer is not Flux's content")
	}
	if src := m.Annotations[ocispec.AnnotationSource]; gitrepo.Key(src) != key {
		return bad("source %q is not %s", src, e.URL)
	}
	if rev := m.Annotations[ocispec.AnnotationRevision]; !strings.HasSuffix(rev, "sha1:"+e.Commit) || e.Commit == "" {
		return bad("revision %q is not the recorded commit %s", rev, e.Commit)
	}
	var bundle *ocispec.Descriptor
	for i, l := range m.Layers {
		if l.MediaType == gitrepo.BundleMediaType {
			if bundle != nil {
				return bad("two bundle layers")
			}
			bundle = &m.Layers[i]
		}
	}
	if bundle == nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %w: carried without its history, it is served as an OCI artifact only", key, ErrNotFound)
	}
	return *bundle, nil
}
