package registry

import (
	"context"
	"errors"
	"strings"

	"github.com/distribution/distribution/v3"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// distribution's mark and sweep marks the digests manifests name, and
// sweeps the blobs stored under digests it did not mark. Content named by a
// sha512 digest is stored under its sha256 digest (blobdigest.go,
// alias.go): the mark saw only the sha512 digest, the sweep deleted the
// data, and then failed on the repository's sha256 link (GarbageCollect
// lost every sha512-named blob that was referenced, and failed).
//
// aliasNamespace is the namespace GarbageCollect gives the mark: each
// manifest it reads also names, beside every non-sha256 digest it
// references (and its own, when it is read by one), the sha256 digest the
// repository links that digest to, so what is stored under it is marked.

type aliasNamespace struct {
	distribution.Namespace
	d storagedriver.StorageDriver
}

var _ distribution.RepositoryEnumerator = aliasNamespace{}

func (n aliasNamespace) Enumerate(ctx context.Context, ingester func(string) error) error {
	e, ok := n.Namespace.(distribution.RepositoryEnumerator)
	if !ok {
		return errors.New("registry: the namespace can not enumerate repositories")
	}
	return e.Enumerate(ctx, ingester)
}

func (n aliasNamespace) Repository(ctx context.Context, name reference.Named) (distribution.Repository, error) {
	r, err := n.Namespace.Repository(ctx, name)
	if err != nil {
		return nil, err
	}
	return aliasRepository{Repository: r, d: n.d}, nil
}

type aliasRepository struct {
	distribution.Repository
	d storagedriver.StorageDriver
}

// Blobs deduplicates what the repository's blob links enumerate: a blob
// uploaded by a sha512 digest is linked under both digests, and
// distribution's enumeration yields its sha256 digest for each link; when
// it was not marked, the sweep removed the sha256 link twice and failed on
// the second.
func (r aliasRepository) Blobs(ctx context.Context) distribution.BlobStore {
	return uniqueBlobs{BlobStore: r.Repository.Blobs(ctx)}
}

type uniqueBlobs struct{ distribution.BlobStore }

func (b uniqueBlobs) Enumerate(ctx context.Context, ingester func(digest.Digest) error) error {
	e, ok := b.BlobStore.(distribution.ManifestEnumerator)
	if !ok {
		return errors.New("registry: the blob store can not enumerate blobs")
	}
	seen := map[digest.Digest]struct{}{}
	return e.Enumerate(ctx, func(d digest.Digest) error {
		if _, ok := seen[d]; ok {
			return nil
		}
		seen[d] = struct{}{}
		return ingester(d)
	})
}

func (r aliasRepository) Manifests(ctx context.Context, opts ...distribution.ManifestServiceOption) (distribution.ManifestService, error) {
	ms, err := r.Repository.Manifests(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return aliasManifests{ManifestService: ms, repo: r.Named().Name(), d: r.d}, nil
}

type aliasManifests struct {
	distribution.ManifestService
	repo string
	d    storagedriver.StorageDriver
}

func (m aliasManifests) Enumerate(ctx context.Context, ingester func(digest.Digest) error) error {
	e, ok := m.ManifestService.(distribution.ManifestEnumerator)
	if !ok {
		return errors.New("registry: the manifest service can not enumerate manifests")
	}
	return e.Enumerate(ctx, ingester)
}

func (m aliasManifests) Get(ctx context.Context, dgst digest.Digest, opts ...distribution.ManifestServiceOption) (distribution.Manifest, error) {
	mf, err := m.ManifestService.Get(ctx, dgst, opts...)
	if err != nil {
		return nil, err
	}
	var extra []ocispec.Descriptor
	for _, d := range append([]digest.Digest{dgst}, digestsOf(mf.References())...) {
		if d.Algorithm() == digest.Canonical {
			continue
		}
		if c, ok := m.canonical(ctx, d); ok {
			extra = append(extra, ocispec.Descriptor{Digest: c})
		}
	}
	if len(extra) == 0 {
		return mf, nil
	}
	return aliasManifest{Manifest: mf, extra: extra}, nil
}

// canonical is the sha256 digest the repository links d to: a blob's
// (_layers) or a manifest's (_manifests/revisions) link.
func (m aliasManifests) canonical(ctx context.Context, d digest.Digest) (digest.Digest, bool) {
	if d.Validate() != nil {
		return "", false
	}
	for _, kind := range []string{"_layers", "_manifests/revisions"} {
		b, err := m.d.GetContent(ctx, repositoriesDir+"/"+m.repo+"/"+kind+"/"+string(d.Algorithm())+"/"+d.Encoded()+"/link")
		if err != nil {
			continue
		}
		if c, err := digest.Parse(strings.TrimSpace(string(b))); err == nil {
			return c, true
		}
	}
	return "", false
}

func digestsOf(ds []ocispec.Descriptor) []digest.Digest {
	out := make([]digest.Digest, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Digest)
	}
	return out
}

type aliasManifest struct {
	distribution.Manifest
	extra []ocispec.Descriptor
}

func (m aliasManifest) References() []ocispec.Descriptor {
	return append(m.Manifest.References(), m.extra...)
}
