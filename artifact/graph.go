package artifact

import (
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker's manifest media types, accepted as image sources beside OCI's.
const (
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// isIndex reports whether mediaType is an image index or manifest list.
func isIndex(mediaType string) bool {
	return mediaType == ocispec.MediaTypeImageIndex || mediaType == mediaTypeDockerList
}

// isManifest reports whether mediaType is an image manifest.
func isManifest(mediaType string) bool {
	return mediaType == ocispec.MediaTypeImageManifest || mediaType == mediaTypeDockerManifest
}

// manifestLimit bounds how much of a manifest or index is read into memory.
const manifestLimit = 4 << 20

// children lists the descriptors a manifest or index refers to (config and
// layers, or manifests). Subjects are not children: a referrer points at its
// subject, it does not contain it.
func children(mediaType string, data []byte) ([]ocispec.Descriptor, error) {
	switch {
	case isManifest(mediaType):
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("parse manifest: %w", err)
		}
		return append([]ocispec.Descriptor{m.Config}, m.Layers...), nil
	case isIndex(mediaType):
		var idx ocispec.Index
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("parse index: %w", err)
		}
		return idx.Manifests, nil
	}
	return nil, nil
}

// isContainer reports whether a blob of this media type refers to others.
func isContainer(mediaType string) bool { return isManifest(mediaType) || isIndex(mediaType) }

// checkDescriptor rejects descriptors that could not name a stored blob.
func checkDescriptor(d ocispec.Descriptor) error {
	if err := d.Digest.Validate(); err != nil {
		return fmt.Errorf("invalid digest %q: %w", d.Digest, err)
	}
	if d.Digest.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%s: unsupported digest algorithm", d.Digest)
	}
	if d.Size < 0 {
		return fmt.Errorf("%s: negative size", d.Digest)
	}
	return nil
}
