package bomscan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
)

// Where clusters and fleets keep their index.
const (
	// IndexRepository is the index's repository in a cluster's registry,
	// FleetIndexRepository in a fleet centre's; IndexTag its tag in both.
	IndexRepository      = "ferry/sbom-index"
	FleetIndexRepository = "ferry-fleet/sbom-index"
	IndexTag             = "latest"
	// MaxIndexSize bounds the index document a store reads (1 GiB).
	MaxIndexSize = 1 << 30
)

// RepositoryStore keeps an index as an OCI artifact under tag in repo: a
// manifest of artifactType bom.MediaTypeIndex with the index as its one
// layer. Each save pushes a new artifact and moves the tag; the registry's
// garbage collection removes the old one. It trusts whoever may push to
// repo: an index pushed there answers as if made from the SBOMs. A store
// whose index others may push to is a PinnedStore.
func RepositoryStore(repo oras.Target, tag string) Store {
	return &repositoryStore{repo: repo, tag: tag}
}

// Pin keeps the digest of the index manifest a PinnedStore saved, where
// those who may push to the registry cannot change it (a cluster's API).
type Pin interface {
	// Get returns the pinned digest, "" if none is.
	Get(ctx context.Context) (digest.Digest, error)
	// Set pins d.
	Set(ctx context.Context, d digest.Digest) error
}

// PinnedStore is a RepositoryStore that loads only the index manifest pin
// names, by digest, whatever the tag names: an index pushed to repo by
// someone who may not set the pin is never loaded, so it can neither
// hide a component the SBOMs list nor add one. Each save pushes the index
// (and moves the tag, for people and garbage collection) and then pins
// it; a save by a user who may not read the pin pushes nothing. An index
// pinned but gone from the registry loads as none.
func PinnedStore(repo oras.Target, tag string, pin Pin) Store {
	return &repositoryStore{repo: repo, tag: tag, pin: pin}
}

type repositoryStore struct {
	repo oras.Target
	tag  string
	pin  Pin // nil: the tag is trusted
	// pinErr is why the pin could not be read at Load: Save then saves
	// nothing.
	pinErr error
	// Limits bound the index read.
	lim bom.IndexLimits
}

var _ Store = (*repositoryStore)(nil)

// resolve is the index manifest to load: the pinned one, or the tag's.
func (s *repositoryStore) resolve(ctx context.Context) (ocispec.Descriptor, error) {
	if s.pin == nil {
		return s.repo.Resolve(ctx, s.tag)
	}
	d, err := s.pin.Get(ctx)
	if err != nil {
		s.pinErr = err
		return ocispec.Descriptor{}, fmt.Errorf("the SBOM index's pin: %w", err)
	}
	s.pinErr = nil
	if d == "" {
		return ocispec.Descriptor{}, errdef.ErrNotFound
	}
	if err := d.Validate(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the SBOM index's pin %.80q: %w", d, err)
	}
	desc, err := s.repo.Resolve(ctx, d.String())
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if desc.Digest != d {
		return ocispec.Descriptor{}, fmt.Errorf("the registry answered %s for the SBOM index %s", desc.Digest, d)
	}
	return desc, nil
}

func (s *repositoryStore) Load(ctx context.Context) (*bom.Index, error) {
	desc, err := s.resolve(ctx)
	if errors.Is(err, errdef.ErrNotFound) {
		return bom.NewIndex(), nil
	}
	if err != nil {
		return nil, artifact.WithRef("resolve", "the SBOM index", err)
	}
	data, err := artifact.FetchManifest(ctx, s.repo, desc)
	if err != nil {
		return nil, fmt.Errorf("the SBOM index: %w", err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil || m.ArtifactType != bom.MediaTypeIndex || len(m.Layers) != 1 || m.Layers[0].MediaType != bom.MediaTypeIndex {
		return nil, fmt.Errorf("the SBOM index %s is not of type %s", desc.Digest, bom.MediaTypeIndex)
	}
	layer := m.Layers[0]
	if layer.Size < 0 || layer.Size > MaxIndexSize {
		return nil, fmt.Errorf("the SBOM index: %d bytes is more than %d", layer.Size, MaxIndexSize)
	}
	rc, err := s.repo.Fetch(ctx, layer)
	if err != nil {
		return nil, fmt.Errorf("the SBOM index: %w", err)
	}
	defer rc.Close()
	v := &verified{vr: content.NewVerifyReader(rc, layer), rc: rc, desc: layer}
	lim := s.lim
	if reflect.ValueOf(lim).IsZero() {
		lim = bom.DefaultIndexLimits
	}
	idx, err := bom.ReadIndex(v, lim)
	if err != nil {
		return nil, fmt.Errorf("the SBOM index %s: %w", layer.Digest, err)
	}
	if _, err := io.Copy(io.Discard, v); err != nil {
		return nil, fmt.Errorf("the SBOM index: %w", err)
	}
	return idx, nil
}

func (s *repositoryStore) Save(ctx context.Context, idx *bom.Index) error {
	if s.pinErr != nil {
		return fmt.Errorf("the SBOM index's pin: %w", s.pinErr)
	}
	f, err := os.CreateTemp("", "ferry-sbom-index-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	dg := digest.SHA256.Digester()
	n, err := idx.WriteTo(io.MultiWriter(f, dg.Hash()))
	if err != nil {
		return fmt.Errorf("write the SBOM index: %w", err)
	}
	if n > MaxIndexSize {
		return fmt.Errorf("the SBOM index: %d bytes is more than %d", n, MaxIndexSize)
	}
	layer := ocispec.Descriptor{MediaType: bom.MediaTypeIndex, Digest: dg.Digest(), Size: n}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := s.repo.Push(ctx, layer, f); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("push the SBOM index: %w", err)
	}
	m, err := oras.PackManifest(ctx, s.repo, oras.PackManifestVersion1_1, bom.MediaTypeIndex, oras.PackManifestOptions{Layers: []ocispec.Descriptor{layer}})
	if err != nil {
		return fmt.Errorf("push the SBOM index: %w", err)
	}
	if err := s.repo.Tag(ctx, m, s.tag); err != nil {
		return fmt.Errorf("tag the SBOM index: %w", err)
	}
	if s.pin != nil {
		if err := s.pin.Set(ctx, m.Digest); err != nil {
			return fmt.Errorf("pin the SBOM index: %w", err)
		}
	}
	return nil
}
