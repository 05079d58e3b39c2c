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
// garbage collection removes the old one.
func RepositoryStore(repo oras.Target, tag string) Store {
	return &repositoryStore{repo: repo, tag: tag}
}

type repositoryStore struct {
	repo oras.Target
	tag  string
	// Limits bound the index read.
	lim bom.IndexLimits
}

var _ Store = (*repositoryStore)(nil)

func (s *repositoryStore) Load(ctx context.Context) (*bom.Index, error) {
	desc, err := s.repo.Resolve(ctx, s.tag)
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
	return nil
}
