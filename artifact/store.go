package artifact

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/ferrypkg/ferry/artifact/internal/transport"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// store is where the streaming copy puts a package's blobs, manifests and
// tags: a registry repository, spoken to as crane does (see pushBlob), or
// any other oras target through its own methods. Blob bodies fail instead
// of ending when their bytes do not match the digest.
type store interface {
	blobExists(ctx context.Context, desc ocispec.Descriptor) (bool, error)
	// pushBlob stores a blob; mount allows a cross-repository mount.
	pushBlob(ctx context.Context, desc ocispec.Descriptor, body io.Reader, buf []byte, mount bool) error
	manifestExists(ctx context.Context, desc ocispec.Descriptor) (bool, error)
	pushManifest(ctx context.Context, desc ocispec.Descriptor, data []byte) error
	// fetchManifest returns a manifest's bytes, errdef.ErrNotFound if absent.
	fetchManifest(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)
	// tag names the manifest desc (whose bytes are data) tag.
	tag(ctx context.Context, desc ocispec.Descriptor, data []byte, tag string) error
	// exists and fetch ask for and read a blob or manifest, told apart
	// by desc's media type (a delta's blobs left out: delta.go).
	exists(ctx context.Context, desc ocispec.Descriptor) (bool, error)
	fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error)
}

// storeFor is the store of dst: a registry repository's (mounting from
// mountFrom, a repository of the same registry, when set) or a target's.
func storeFor(dst oras.Target, mountFrom string) store {
	if repo, ok := dst.(*remote.Repository); ok {
		return &repoStore{repo: repo, mountFrom: mountFrom}
	}
	return targetStore{dst}
}

// repoStore is a registry repository.
type repoStore struct {
	repo      *remote.Repository
	mountFrom string
}

func (s *repoStore) blobExists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	return s.repo.Blobs().Exists(ctx, desc)
}

func (s *repoStore) pushBlob(ctx context.Context, desc ocispec.Descriptor, body io.Reader, buf []byte, mount bool) error {
	from := ""
	if mount {
		from = s.mountFrom
	}
	return transport.PushBlob(ctx, s.repo, desc, body, buf, from)
}

func (s *repoStore) manifestExists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	return s.repo.Manifests().Exists(ctx, desc)
}

func (s *repoStore) pushManifest(ctx context.Context, desc ocispec.Descriptor, data []byte) error {
	return s.repo.Manifests().Push(ctx, desc, bytes.NewReader(data))
}

func (s *repoStore) fetchManifest(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	return FetchManifest(ctx, s.repo.Manifests(), desc)
}

// tag sends the manifest again with its tag: one PUT, as a registry
// takes a tag.
func (s *repoStore) tag(ctx context.Context, desc ocispec.Descriptor, data []byte, tag string) error {
	return s.repo.PushReference(ctx, desc, bytes.NewReader(data), tag)
}

func (s *repoStore) exists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	return s.repo.Exists(ctx, desc)
}

func (s *repoStore) fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	return s.repo.Fetch(ctx, desc)
}

// targetStore is any other oras target: an OCI layout store, memory, a
// package. A blob it has already is not an error.
type targetStore struct{ t oras.Target }

func (s targetStore) blobExists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	return s.t.Exists(ctx, desc)
}

func (s targetStore) pushBlob(ctx context.Context, desc ocispec.Descriptor, body io.Reader, _ []byte, _ bool) error {
	if desc.MediaType == "" {
		desc.MediaType = "application/octet-stream"
	}
	if err := s.t.Push(ctx, desc, body); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return err
	}
	return nil
}

func (s targetStore) manifestExists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	return s.t.Exists(ctx, desc)
}

func (s targetStore) pushManifest(ctx context.Context, desc ocispec.Descriptor, data []byte) error {
	return s.pushBlob(ctx, desc, bytes.NewReader(data), nil, false)
}

func (s targetStore) fetchManifest(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	return FetchManifest(ctx, s.t, desc)
}

func (s targetStore) tag(ctx context.Context, desc ocispec.Descriptor, _ []byte, tag string) error {
	return s.t.Tag(ctx, desc, tag)
}

func (s targetStore) exists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	return s.t.Exists(ctx, desc)
}

func (s targetStore) fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	return s.t.Fetch(ctx, desc)
}
