package backup

import (
	"encoding/json"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker's manifest media types, which registries hold beside OCI's.
const (
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
)

func isManifest(mt string) bool {
	return mt == ocispec.MediaTypeImageManifest || mt == mediaTypeDockerManifest
}

func isIndex(mt string) bool { return mt == ocispec.MediaTypeImageIndex || mt == mediaTypeDockerList }

// isContainer reports whether a blob of this media type names others.
func isContainer(mt string) bool { return isManifest(mt) || isIndex(mt) }

// children lists what a manifest (config, layers) or an index (manifests)
// names; a subject is not a child.
func children(mt string, data []byte) ([]ocispec.Descriptor, error) {
	switch {
	case isManifest(mt):
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		return append([]ocispec.Descriptor{m.Config}, m.Layers...), nil
	case isIndex(mt):
		var idx ocispec.Index
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, err
		}
		return idx.Manifests, nil
	}
	return nil, nil
}
