package artifact

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// A delta is a package archive that leaves out the blobs a far side already
// holds: the same head (ferry.json, oci-layout, index.json naming the signed
// root and its signature), then ferry-delta.json listing the blobs left out
// (digest, size, media type), then the blobs it carries, children before
// parents. Read alone (Inspect, Verify) it is checked as far as it goes:
// every blob it carries against its digest, the signature over the root,
// the graph down to what it leaves out. Pushed (Copy, Push, Mirror: `package
// push`, `deploy`, `registry load`) into a registry that holds the rest, it
// completes the package there. Before anything is written, the
// destination repository is asked for the blobs left out (and the one
// repository the user names as the source, MountFrom, for those it lacks;
// no other) and a MissingBlobsError names those missing; each is read back
// and hashed; the whole graph down to them is checked. Only then is
// anything mounted from the source or uploaded (deltacomplete.go).
//
// An older ferry refuses a delta ("unexpected entry ferry-delta.json")
// rather than taking it for a whole package.

// deltaFileName is the entry that makes an archive a delta; it follows
// index.json.
const deltaFileName = "ferry-delta.json"

// MediaTypeDelta is the media type of ferry-delta.json.
const MediaTypeDelta = "application/vnd.ferry.delta.v1+json"

// DeltaInfo is what a delta's ferry-delta.json says.
type DeltaInfo struct {
	MediaType string `json:"mediaType"`
	// Base names what the blobs left out were taken from (the receipt's
	// source: a registry, a package).
	Base string `json:"base,omitempty"`
	// Omitted are the blobs of the package graph the delta leaves out, by
	// digest.
	Omitted []ocispec.Descriptor `json:"omitted"`
}

// OmittedSize adds up the sizes of the blobs the delta leaves out.
func (d *DeltaInfo) OmittedSize() int64 {
	var n int64
	for _, o := range d.Omitted {
		n += o.Size
	}
	return n
}

// deltaHead is a delta's ferry-delta.json as Open read it.
type deltaHead struct {
	info    DeltaInfo
	data    []byte
	omitted map[digest.Digest]ocispec.Descriptor
	size    int64
}

// Delta is the package's ferry-delta.json, nil when it is a whole package.
func (r *Reader) Delta() *DeltaInfo {
	if r.delta == nil {
		return nil
	}
	info := r.delta.info
	info.Omitted = slices.Clone(info.Omitted)
	return &info
}

// readDelta reads ferry-delta.json when it is the entry after the head.
// Anything else is left to the walk.
func (r *Reader) readDelta(tr *tar.Reader) error {
	h, err := next(tr)
	if err != nil || h.Name != deltaFileName {
		return nil
	}
	if err := checkEntry(h); err != nil {
		return err
	}
	data, err := readEntry(tr, h)
	if err != nil {
		return err
	}
	return r.setDelta(data)
}

// checkDelta reads ferry-delta.json again in a walk: it must be what Open read.
func (r *Reader) checkDelta(tr *tar.Reader, h *tar.Header) error {
	if r.delta == nil {
		return fmt.Errorf("%w: unexpected entry %.64q", ErrCorrupt, h.Name)
	}
	data, err := readEntry(tr, h)
	if err != nil {
		return err
	}
	if !bytes.Equal(data, r.delta.data) {
		return fmt.Errorf("%w: the package changed since it was opened (its %s differs)", ErrCorrupt, deltaFileName)
	}
	return nil
}

// setDelta parses and checks ferry-delta.json.
func (r *Reader) setDelta(data []byte) error {
	var info DeltaInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, deltaFileName, err)
	}
	if info.MediaType != MediaTypeDelta {
		return fmt.Errorf("%w: %s: media type %.64q, not %s", ErrCorrupt, deltaFileName, info.MediaType, MediaTypeDelta)
	}
	if len(info.Omitted) > MaxBlobs {
		return fmt.Errorf("%w: %s lists more than %d blobs", ErrCorrupt, deltaFileName, MaxBlobs)
	}
	h := &deltaHead{info: info, data: data, omitted: make(map[digest.Digest]ocispec.Descriptor, len(info.Omitted))}
	for _, d := range info.Omitted {
		if err := graph.CheckDescriptor(d); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCorrupt, deltaFileName, err)
		}
		if _, dup := h.omitted[d.Digest]; dup {
			return fmt.Errorf("%w: %s lists %s twice", ErrCorrupt, deltaFileName, d.Digest)
		}
		if d.Digest == r.root.Digest {
			return fmt.Errorf("%w: %s leaves out the package root %s: a delta carries it", ErrCorrupt, deltaFileName, d.Digest)
		}
		h.omitted[d.Digest] = d
		h.size = min(h.size+d.Size, sizeCeiling)
	}
	r.delta = h
	return nil
}

// omittedSize is what a delta leaves out, in bytes; 0 for a whole package.
func (h *deltaHead) omittedSize() int64 {
	if h == nil {
		return 0
	}
	return h.size
}

// omittedBlob returns the size of a blob the delta leaves out.
func (h *deltaHead) omittedBlob(d digest.Digest) (int64, bool) {
	if h == nil {
		return 0, false
	}
	o, ok := h.omitted[d]
	return o.Size, ok
}

// check holds a walked delta to its list: nothing it lists may be carried
// too, and, unless the graph below what it leaves out could not be walked
// (partial), everything it lists must be part of the graph.
func (h *deltaHead) check(carried map[digest.Digest]int64, reached map[digest.Digest]bool, partial bool) error {
	if h == nil {
		return nil
	}
	for _, o := range h.info.Omitted {
		if _, ok := carried[o.Digest]; ok {
			return fmt.Errorf("%w: blob %s is both carried and listed as left out in %s", ErrCorrupt, o.Digest, deltaFileName)
		}
		if !reached[o.Digest] && !partial {
			return fmt.Errorf("%w: %s lists blob %s, which the package does not reference", ErrCorrupt, deltaFileName, o.Digest)
		}
	}
	return nil
}
