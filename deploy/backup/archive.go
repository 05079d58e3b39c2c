package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/readahead"
)

// deltaFileName is the entry that makes a package archive a delta (see
// artifact.DeltaInfo).
const deltaFileName = "ferry-delta.json"

// tarBlock is tar's record unit; the archive ends with two zero blocks.
const tarBlock = 512

// archive is a backup as a plain tar in the OCI layout of a package, each
// entry at a known offset: the same content and head give the same bytes,
// so that a write can start again at any offset (resume) without fetching
// what lies before it.
type archive struct {
	entries []*tarEntry
	size    int64
	root    ocispec.Descriptor
	// carried and omitted count the registry's blobs written and left to
	// the base chain.
	carried, omitted         int
	carriedSize, omittedSize int64
}

// tarEntry is one entry: a file held in memory (data), a folder, or a
// blob fetched from repo when written.
type tarEntry struct {
	name string
	dir  bool
	data []byte
	desc ocispec.Descriptor
	repo string
	off  int64 // where its header starts
	hdr  []byte
}

func (e *tarEntry) end() int64 { return e.off + int64(len(e.hdr)) + padded(e.desc.Size) }

func padded(n int64) int64 { return (n + tarBlock - 1) / tarBlock * tarBlock }

// head is what makes a backup's head the same on a rerun: when it was
// made, and its signature (random each time it is made).
type head struct {
	Created   string                   `json:"created"`
	Signature *ocispec.Descriptor      `json:"signature,omitempty"`
	SigBlobs  map[digest.Digest][]byte `json:"sigBlobs,omitempty"`
}

// build lays out the backup of c: ferry.json, the record, the package
// manifest, the registry's blobs (those base lacks), the root, and the
// signature (signed with key, or taken from h when resuming).
func build(c *content, h *head, key artifact.Signer, base map[digest.Digest]int64) (*archive, error) {
	created, err := time.Parse(time.RFC3339, h.Created)
	if err != nil {
		return nil, fmt.Errorf("backup time %.40q: %w", h.Created, err)
	}
	version := created.UTC().Format("20060102T150405Z")
	recData, err := json.Marshal(c.rec)
	if err != nil {
		return nil, err
	}
	recDesc := blobDesc(MediaTypeRecord, recData)
	comp := artifact.Component{Name: "registry", Required: true,
		Files: []artifact.File{{Source: "record.json", Target: "record.json", Mode: 0o644, Digest: recDesc.Digest, Size: recDesc.Size}}}
	rootEntries := []ocispec.Descriptor{}
	for _, e := range c.entries {
		comp.Images = append(comp.Images, artifact.Image{Ref: e.ref, OriginalDigest: e.desc.Digest, Digest: e.desc.Digest, MediaType: e.desc.MediaType, Platforms: []string{}, Size: e.size})
		d := e.desc
		d.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindImage, artifact.AnnotationComponent: comp.Name, artifact.AnnotationImageRef: e.ref}
		rootEntries = append(rootEntries, d)
	}
	cfg := &artifact.Config{SchemaVersion: artifact.ConfigSchemaVersion, Name: PackageName, Version: version,
		Description: "backup of " + c.rec.Source, Created: h.Created, Platforms: []string{}, Components: []artifact.Component{comp}}
	cfgData, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgDesc := blobDesc(artifact.MediaTypeConfig, cfgData)
	ann := map[string]string{artifact.AnnotationPackageName: PackageName, artifact.AnnotationPackageVersion: version}
	pmData, err := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		ArtifactType: artifact.ArtifactTypePackage, Config: cfgDesc, Layers: []ocispec.Descriptor{recDesc}, Annotations: ann})
	if err != nil {
		return nil, err
	}
	pmDesc := blobDesc(ocispec.MediaTypeImageManifest, pmData)
	pmDesc.ArtifactType = artifact.ArtifactTypePackage
	pmDesc.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindPackage}
	rootAnn := map[string]string{ocispec.AnnotationRefName: version, ocispec.AnnotationCreated: h.Created,
		artifact.AnnotationPackageName: PackageName, artifact.AnnotationPackageVersion: version}
	rootData, err := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		ArtifactType: artifact.ArtifactTypePackage, Manifests: append([]ocispec.Descriptor{pmDesc}, rootEntries...), Annotations: rootAnn})
	if err != nil {
		return nil, err
	}
	if len(rootData) > artifact.MaxManifestSize || len(cfgData) > artifact.MaxManifestSize {
		return nil, fmt.Errorf("%d tags and referrers are more than one backup can list (its root and ferry.json are held to %d bytes each): back up fewer repositories at a time", len(c.entries), artifact.MaxManifestSize)
	}
	rootDesc := blobDesc(ocispec.MediaTypeImageIndex, rootData)
	rootDesc.ArtifactType = artifact.ArtifactTypePackage
	plan := &artifact.Plan{Blobs: map[digest.Digest]*artifact.Blob{}, ConfigData: cfgData, Config: cfg, Root: rootDesc, Index: []ocispec.Descriptor{rootDesc}}
	switch {
	case h.Signature != nil:
		plan.Index = append(plan.Index, *h.Signature)
	case key != nil:
		if err := plan.Sign(key); err != nil {
			return nil, err
		}
		sig := plan.Index[1]
		h.Signature, h.SigBlobs = &sig, map[digest.Digest][]byte{}
		for d, b := range plan.Blobs {
			h.SigBlobs[d] = b.Data
		}
	}
	indexData, err := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: withRef(plan.Index, version)})
	if err != nil {
		return nil, err
	}

	a := &archive{root: rootDesc}
	files := []*tarEntry{{name: artifact.ConfigFileName, data: cfgData}, {name: ocispec.ImageLayoutFile, data: []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {name: "index.json", data: indexData}}
	omit := omitted(c, base)
	if base != nil {
		info := artifact.DeltaInfo{MediaType: artifact.MediaTypeDelta, Base: baseName(c.rec.Base), Omitted: []ocispec.Descriptor{}}
		for _, b := range c.rec.Blobs {
			if omit[b.Digest] {
				info.Omitted = append(info.Omitted, ocispec.Descriptor{MediaType: mediaTypeOf(b), Digest: b.Digest, Size: b.Size})
			}
		}
		slices.SortFunc(info.Omitted, func(x, y ocispec.Descriptor) int { return strings.Compare(string(x.Digest), string(y.Digest)) })
		data, err := json.Marshal(info)
		if err != nil {
			return nil, err
		}
		if len(data) > artifact.MaxManifestSize {
			return nil, fmt.Errorf("the blobs the base holds are more than one incremental backup can list (%d bytes, at most %d)", len(data), artifact.MaxManifestSize)
		}
		files = append(files, &tarEntry{name: deltaFileName, data: data})
	}
	files = append(files, &tarEntry{name: "blobs/", dir: true}, &tarEntry{name: "blobs/sha256/", dir: true})
	for _, f := range files {
		f.desc.Size = int64(len(f.data))
	}
	a.entries = files
	addData := func(d ocispec.Descriptor, data []byte) {
		a.entries = append(a.entries, &tarEntry{name: blobName(d.Digest), data: data, desc: d})
	}
	addData(cfgDesc, cfgData)
	addData(recDesc, recData)
	addData(pmDesc, pmData)
	for _, b := range c.rec.Blobs {
		d := ocispec.Descriptor{MediaType: b.MediaType, Digest: b.Digest, Size: b.Size}
		switch {
		case b.Digest == cfgDesc.Digest || b.Digest == recDesc.Digest || b.Digest == pmDesc.Digest:
		case omit[b.Digest]:
			a.omitted++
			a.omittedSize += b.Size
		case c.nodes[b.Digest] != nil:
			addData(d, c.nodes[b.Digest])
			a.carried++
			a.carriedSize += b.Size
		default:
			a.entries = append(a.entries, &tarEntry{name: blobName(b.Digest), desc: d, repo: c.rec.Repositories[b.Repos[0]].Name})
			a.carried++
			a.carriedSize += b.Size
		}
	}
	addData(rootDesc, rootData)
	if h.Signature != nil {
		kids, err := children(h.Signature.MediaType, h.SigBlobs[h.Signature.Digest])
		if err != nil {
			return nil, fmt.Errorf("signature: %w", err)
		}
		for _, k := range append(kids, *h.Signature) {
			data, ok := h.SigBlobs[k.Digest]
			if !ok || digest.FromBytes(data) != k.Digest {
				return nil, fmt.Errorf("signature blob %s is missing", k.Digest)
			}
			addData(blobDesc(k.MediaType, data), data)
		}
	}
	var off int64
	for _, e := range a.entries {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: e.desc.Size, ModTime: created.UTC()}
		if e.dir {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		var buf bytes.Buffer
		if err := tar.NewWriter(&buf).WriteHeader(hdr); err != nil {
			return nil, err
		}
		e.off, e.hdr = off, buf.Bytes()
		off = e.end()
	}
	a.size = off + 2*tarBlock
	return a, nil
}

// omitted decides which blobs base holds and the backup leaves out: a blob
// base lists at its size, a manifest or index only with everything under
// it (so that the delta's graph can be checked down to what it leaves out).
func omitted(c *content, base map[digest.Digest]int64) map[digest.Digest]bool {
	out := map[digest.Digest]bool{}
	if base == nil {
		return out
	}
	for _, b := range c.rec.Blobs { // children first
		size, held := base[b.Digest]
		leave := held && size == b.Size
		if data, ok := c.nodes[b.Digest]; ok && leave {
			kids, _ := children(b.MediaType, data)
			for _, k := range kids {
				leave = leave && out[k.Digest]
			}
		}
		out[b.Digest] = leave
	}
	return out
}

func mediaTypeOf(b Blob) string {
	if b.MediaType != "" {
		return b.MediaType
	}
	return "application/octet-stream"
}

func baseName(l *Link) string {
	if l == nil {
		return ""
	}
	if l.Root != "" {
		return l.Name + " (" + l.Root.String() + ")"
	}
	return l.Name
}

// withRef gives index.json's first entry (the root) its version tag.
func withRef(index []ocispec.Descriptor, version string) []ocispec.Descriptor {
	out := slices.Clone(index)
	out[0].Annotations = map[string]string{ocispec.AnnotationRefName: version}
	return out
}

func blobDesc(mt string, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

func blobName(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

// fetchFunc opens a blob the registry holds, from one of its repositories.
type fetchFunc func(ctx context.Context, repo string, desc ocispec.Descriptor) (io.ReadCloser, error)

// writeFrom writes the archive's bytes from offset start on to w: entries
// that end before start are passed over unread; a blob that straddles it
// is fetched whole (and verified) but written from start. Every blob
// fetched is checked against its digest and size.
func (a *archive) writeFrom(ctx context.Context, w io.Writer, start int64, fetch fetchFunc, progress artifact.ProgressFunc) error {
	e := &emitter{w: w, start: start}
	buf := make([]byte, 4<<20)
	var total int64
	for _, t := range a.entries {
		total += t.desc.Size
	}
	for _, t := range a.entries {
		if t.end() <= start {
			e.pos = t.end()
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.write(t.hdr); err != nil {
			return err
		}
		if t.data != nil || t.dir {
			if err := e.write(t.data); err != nil {
				return err
			}
		} else if err := a.copyBlob(ctx, e, t, fetch, buf); err != nil {
			return err
		}
		if err := e.write(make([]byte, padded(t.desc.Size)-t.desc.Size)); err != nil {
			return err
		}
		if progress != nil && !t.dir && strings.HasPrefix(t.name, "blobs/") {
			progress(artifact.Progress{Phase: artifact.PhaseWrite, Desc: t.desc, Bytes: t.desc.Size, TotalBytes: total, TotalBlobs: len(a.entries)})
		}
	}
	return e.write(make([]byte, 2*tarBlock))
}

// copyBlob fetches one blob and writes it, verified.
func (a *archive) copyBlob(ctx context.Context, e *emitter, t *tarEntry, fetch fetchFunc, buf []byte) error {
	rc, err := fetch(ctx, t.repo, t.desc)
	if err != nil {
		return fmt.Errorf("fetch %s from %s: %w", t.desc.Digest, t.repo, err)
	}
	defer rc.Close()
	pr := readahead.New(io.LimitReader(rc, t.desc.Size+1), buf, sha256.New())
	defer pr.Close()
	var n int64
	err = pr.Chunks(func(b []byte) error {
		if n += int64(len(b)); n > t.desc.Size {
			return fmt.Errorf("longer than its %d bytes", t.desc.Size)
		}
		return e.write(b)
	})
	switch {
	case err != nil:
		return fmt.Errorf("blob %s in %s: %w", t.desc.Digest, t.repo, err)
	case n < t.desc.Size:
		return fmt.Errorf("blob %s in %s: truncated: %d of %d bytes", t.desc.Digest, t.repo, n, t.desc.Size)
	case digest.NewDigest(digest.SHA256, pr.Sum()) != t.desc.Digest:
		return fmt.Errorf("blob %s in %s: the registry's copy does not match its digest", t.desc.Digest, t.repo)
	}
	return nil
}

// emitter writes the bytes of a stream from offset start on.
type emitter struct {
	w          io.Writer
	pos, start int64
}

func (e *emitter) write(p []byte) error {
	n := int64(len(p))
	if e.pos+n <= e.start {
		e.pos += n
		return nil
	}
	if e.pos < e.start {
		p = p[e.start-e.pos:]
		e.pos = e.start
	}
	_, err := e.w.Write(p)
	e.pos += int64(len(p))
	return err
}
