// Package graph walks OCI graphs: which media types are manifests and
// indexes, the children of each, descriptors checked before they are
// fetched, and the canonical order a package archive writes blobs in.
package graph

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker's manifest media types, accepted as image sources beside OCI's.
const (
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// IsIndex reports whether mediaType is an image index or manifest list.
func IsIndex(mediaType string) bool {
	return mediaType == ocispec.MediaTypeImageIndex || mediaType == mediaTypeDockerList
}

// IsManifest reports whether mediaType is an image manifest.
func IsManifest(mediaType string) bool {
	return mediaType == ocispec.MediaTypeImageManifest || mediaType == mediaTypeDockerManifest
}

// Children lists the descriptors a manifest or index refers to (config and
// layers, or manifests). Subjects are not children: a referrer points at its
// subject, it does not contain it.
func Children(mediaType string, data []byte) ([]ocispec.Descriptor, error) {
	switch {
	case IsManifest(mediaType):
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("parse manifest: %w", err)
		}
		return append([]ocispec.Descriptor{m.Config}, m.Layers...), nil
	case IsIndex(mediaType):
		var idx ocispec.Index
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("parse index: %w", err)
		}
		return idx.Manifests, nil
	}
	return nil, nil
}

// IsContainer reports whether a blob of this media type refers to others.
func IsContainer(mediaType string) bool { return IsManifest(mediaType) || IsIndex(mediaType) }

// CheckDescriptor rejects descriptors that could not name a stored blob.
func CheckDescriptor(d ocispec.Descriptor) error {
	if err := d.Digest.Validate(); err != nil {
		return fmt.Errorf("invalid digest %.80q: %w", d.Digest, err)
	}
	if d.Digest.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%s: unsupported digest algorithm", d.Digest)
	}
	if d.Size < 0 {
		return fmt.Errorf("%s: negative size", d.Digest)
	}
	return nil
}

// JSONFetcher returns the bytes of a manifest or index.
type JSONFetcher func(d ocispec.Descriptor) ([]byte, error)

// CanonicalOrder lists every blob reachable from roots, each once, in the
// order a package archive stores them: for each root in turn, the blobs it
// adds, sorted by height (leaves 0, a parent above each child) and then by
// first visit in a depth-first walk following descriptor order (config, then
// layers; manifests of an index in order). The order depends only on the
// graph, so create, pull and sign write the same bytes.
func CanonicalOrder(roots []ocispec.Descriptor, fetch JSONFetcher) ([]ocispec.Descriptor, error) {
	type entry struct {
		desc          ocispec.Descriptor
		height, visit int
	}
	placed := map[digest.Digest]bool{}
	var out []ocispec.Descriptor
	for _, root := range roots {
		seen := map[digest.Digest]*entry{}
		var list []*entry
		var walk func(d ocispec.Descriptor) (int, error)
		walk = func(d ocispec.Descriptor) (int, error) {
			if e, ok := seen[d.Digest]; ok {
				return e.height, nil
			}
			e := &entry{desc: ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}, visit: len(seen)}
			seen[d.Digest] = e
			if IsContainer(d.MediaType) {
				data, err := fetch(d)
				if err != nil {
					return 0, err
				}
				kids, err := Children(d.MediaType, data)
				if err != nil {
					return 0, fmt.Errorf("%s: %w", d.Digest, err)
				}
				for _, k := range kids {
					if err := CheckDescriptor(k); err != nil {
						return 0, err
					}
					h, err := walk(k)
					if err != nil {
						return 0, err
					}
					e.height = max(e.height, h+1)
				}
				e.height = max(e.height, 1)
			}
			if !placed[d.Digest] {
				list = append(list, e)
			}
			return e.height, nil
		}
		if _, err := walk(root); err != nil {
			return nil, err
		}
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].height != list[j].height {
				return list[i].height < list[j].height
			}
			return list[i].visit < list[j].visit
		})
		for _, e := range list {
			placed[e.desc.Digest] = true
			out = append(out, e.desc)
		}
	}
	return out, nil
}
