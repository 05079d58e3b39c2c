package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// A delta is a package archive that leaves out the blobs a far side already
// holds: the same head (ferry.json, oci-layout, index.json naming the signed
// root and its signature), then ferry-delta.json listing the blobs left out
// (digest, size, media type), then the blobs it carries, children before
// parents. Read alone (Inspect, Verify) it is checked as far as it goes:
// every blob it carries against its digest, the signature over the root,
// the graph down to what it leaves out. Pushed (Copy, Push, Mirror: `package
// push`, `deploy`, `registry load`) into a registry that holds the rest, it
// completes the package there: the registry is asked for every blob left
// out before anything is written — in the destination repository, else in
// its other repositories, to be mounted from there — (a MissingBlobsError
// names those it lacks), each is read back and hashed, and the whole graph
// checked, before any manifest or tag is written.
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
		return fmt.Errorf("%w: unexpected entry %q", ErrCorrupt, h.Name)
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
		return fmt.Errorf("%w: %s: media type %q, not %s", ErrCorrupt, deltaFileName, info.MediaType, MediaTypeDelta)
	}
	if len(info.Omitted) > MaxBlobs {
		return fmt.Errorf("%w: %s lists more than %d blobs", ErrCorrupt, deltaFileName, MaxBlobs)
	}
	h := &deltaHead{info: info, data: data, omitted: make(map[digest.Digest]ocispec.Descriptor, len(info.Omitted))}
	for _, d := range info.Omitted {
		if err := checkDescriptor(d); err != nil {
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

// ErrMissingBlobs means the destination of a delta lacks blobs the delta
// leaves out; a MissingBlobsError names them.
var ErrMissingBlobs = errors.New("the destination lacks blobs the delta leaves out")

// MissingBlobsError is the refusal of a delta whose destination lacks some
// of the blobs it leaves out, before anything was written.
type MissingBlobsError struct {
	// Missing are the blobs the destination lacks, by digest; Omitted is
	// how many the delta leaves out.
	Missing []ocispec.Descriptor
	Omitted int
}

// missingShown is how many missing digests the message names.
const missingShown = 3

func (e *MissingBlobsError) Error() string {
	var names []string
	for _, d := range e.Missing[:min(len(e.Missing), missingShown)] {
		names = append(names, d.Digest.String())
	}
	more := ""
	if n := len(e.Missing) - missingShown; n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("%v: %d of its %d: %s%s", ErrMissingBlobs, len(e.Missing), e.Omitted, strings.Join(names, ", "), more)
}

func (e *MissingBlobsError) Unwrap() error { return ErrMissingBlobs }

// complete makes sure dst holds every blob the delta leaves out, as they
// are: first it asks for each (HEAD), and refuses with a MissingBlobsError
// naming those missing before anything is written; then it reads each back
// and hashes it (nothing is taken on the registry's word), and returns the
// manifests and indexes among them for the graph check. Each counts as
// skipped.
func (p *pusher) complete(ctx context.Context, d *deltaHead) (map[digest.Digest][]byte, error) {
	limit := p.opts.Concurrency
	if limit <= 0 {
		limit = DefaultCopyConcurrency
	}
	omitted := d.info.Omitted
	missing := make([]bool, len(omitted))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	for i, o := range omitted {
		g.Go(func() error {
			ok, err := p.dst.exists(gctx, o)
			if err != nil {
				return &BlobError{Op: "check blob", Digest: o.Digest, Err: err}
			}
			missing[i] = !ok
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var lacks []ocispec.Descriptor
	for i, m := range missing {
		if m {
			lacks = append(lacks, omitted[i])
		}
	}
	// What the repository lacks another repository of the registry may
	// hold (an image another package brought): taken from there.
	var from map[digest.Digest]*repoStore
	if rs, ok := p.dst.(*repoStore); ok && len(lacks) > 0 {
		var err error
		if from, err = rs.locate(ctx, lacks); err != nil {
			return nil, err
		}
		lacks = slices.DeleteFunc(lacks, func(d ocispec.Descriptor) bool { return from[d.Digest] != nil })
	}
	if len(lacks) > 0 {
		return nil, &MissingBlobsError{Missing: lacks, Omitted: len(omitted)}
	}
	var held int64
	for _, o := range omitted {
		if isContainer(o.MediaType) {
			if held += o.Size; o.Size > MaxManifestSize || held > MaxGraphSize {
				return nil, fmt.Errorf("%w: %s: the manifests it leaves out total more than %d bytes", ErrCorrupt, deltaFileName, MaxGraphSize)
			}
		}
	}
	nodes := make([][]byte, len(omitted))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(limit)
	for i, o := range omitted {
		src := p.dst
		if rs := from[o.Digest]; rs != nil {
			src = rs
		}
		g.Go(func() error {
			data, err := readBack(gctx, src, o)
			if err != nil {
				return err
			}
			nodes[i] = data
			p.add(o, false)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	completed := map[digest.Digest][]byte{}
	for i, o := range omitted {
		if isContainer(o.MediaType) {
			completed[o.Digest] = nodes[i]
		}
	}
	if len(from) > 0 {
		if err := p.dst.(*repoStore).bring(ctx, omitted, from, completed); err != nil {
			return nil, err
		}
	}
	return completed, nil
}

// locate finds the repositories of the registry that hold blobs s lacks
// (HEAD in each repository of its catalog, until every one is found); a
// registry that does not list its repositories finds none.
func (s *repoStore) locate(ctx context.Context, lacks []ocispec.Descriptor) (map[digest.Digest]*repoStore, error) {
	reg, err := remote.NewRegistry(s.repo.Reference.Registry)
	if err != nil {
		return nil, err
	}
	reg.PlainHTTP, reg.Client = s.repo.PlainHTTP, s.repo.Client
	var names []string
	if err := reg.Repositories(ctx, "", func(page []string) error { names = append(names, page...); return nil }); err != nil {
		return nil, nil
	}
	found := map[digest.Digest]*repoStore{}
	for _, name := range names {
		if name == s.repo.Reference.Repository || len(found) == len(lacks) {
			continue
		}
		r, err := reg.Repository(ctx, name)
		if err != nil {
			return nil, err
		}
		other := &repoStore{repo: r.(*remote.Repository)}
		for _, d := range lacks {
			if found[d.Digest] != nil {
				continue
			}
			if ok, err := other.exists(ctx, d); err == nil && ok {
				found[d.Digest] = other
			}
		}
	}
	return found, nil
}

// bring puts into s the blobs a delta leaves out that other repositories
// of its registry hold (from), each read back and verified already: blobs
// mounted (uploaded when the registry does not mount), then manifests,
// children first.
func (s *repoStore) bring(ctx context.Context, omitted []ocispec.Descriptor, from map[digest.Digest]*repoStore, nodes map[digest.Digest][]byte) error {
	var manifests []ocispec.Descriptor
	for _, o := range omitted {
		src := from[o.Digest]
		switch {
		case src == nil:
		case isContainer(o.MediaType):
			manifests = append(manifests, o)
		default:
			getContent := func() (io.ReadCloser, error) { return src.repo.Fetch(ctx, o) }
			if err := s.repo.Mount(ctx, o, src.repo.Reference.Repository, getContent); err != nil {
				return &BlobError{Op: "mount blob", Digest: o.Digest, Err: err}
			}
		}
	}
	height := map[digest.Digest]int{}
	var h func(d digest.Digest, mediaType string) int
	h = func(d digest.Digest, mediaType string) int {
		if v, ok := height[d]; ok {
			return v
		}
		height[d] = 0
		kids, _ := children(mediaType, nodes[d])
		for _, k := range kids {
			if from[k.Digest] != nil && isContainer(k.MediaType) {
				height[d] = max(height[d], h(k.Digest, k.MediaType)+1)
			}
		}
		return height[d]
	}
	for _, m := range manifests {
		h(m.Digest, m.MediaType)
	}
	slices.SortStableFunc(manifests, func(a, b ocispec.Descriptor) int { return height[a.Digest] - height[b.Digest] })
	for _, m := range manifests {
		if err := s.pushManifest(ctx, m, nodes[m.Digest]); err != nil {
			return &BlobError{Op: "push manifest", Digest: m.Digest, Err: err}
		}
	}
	return nil
}

// errNotAsListed is the cause of a BlobError for a blob read back from a
// delta's destination that does not hash to its digest.
var errNotAsListed = fmt.Errorf("%w: the destination's copy does not match its digest", ErrCorrupt)

// OpReadBack is the Op of a BlobError about a blob a delta leaves out, read
// back from its destination.
const OpReadBack = "read back"

// readBack reads one blob from dst and checks it against its digest and
// size; a manifest or index is returned whole.
func readBack(ctx context.Context, dst store, desc ocispec.Descriptor) ([]byte, error) {
	rc, err := dst.fetch(ctx, desc)
	if err != nil {
		return nil, &BlobError{Op: OpReadBack, Digest: desc.Digest, Err: err}
	}
	defer rc.Close()
	vr := content.NewVerifyReader(rc, desc)
	var keep *bytes.Buffer
	var w io.Writer = io.Discard
	if isContainer(desc.MediaType) {
		keep = bytes.NewBuffer(make([]byte, 0, desc.Size))
		w = keep
	}
	if _, err := io.Copy(w, vr); err != nil {
		if errors.Is(err, content.ErrTrailingData) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &BlobError{Op: OpReadBack, Digest: desc.Digest, Err: errNotAsListed}
		}
		return nil, &BlobError{Op: OpReadBack, Digest: desc.Digest, Err: err}
	}
	if err := vr.Verify(); err != nil {
		return nil, &BlobError{Op: OpReadBack, Digest: desc.Digest, Err: errNotAsListed}
	}
	if keep == nil {
		return nil, nil
	}
	return keep.Bytes(), nil
}

// DeltaOptions configures Delta. The zero value works.
type DeltaOptions struct {
	// Format is the archive format; if empty, taken from the output name.
	Format Format
	// Progress, if set, receives a PhaseWrite event per blob written.
	Progress ProgressFunc
}

// DeltaResult tells what Delta wrote.
type DeltaResult struct {
	Path string             `json:"path"`
	Root ocispec.Descriptor `json:"root"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size"`
	// Carried blobs are in the archive; Omitted ones are left out.
	Carried     int   `json:"carried"`
	CarriedSize int64 `json:"carriedSize"`
	Omitted     int   `json:"omitted"`
	OmittedSize int64 `json:"omittedSize"`
}

// Delta writes a delta of the package r at out, atomically: its head and
// signatures, and exactly the blobs of its graph that have does not list
// (by digest and size), leaving out the rest. A manifest or index is left
// out only with everything under it, so a delta's graph can be checked down
// to what it leaves out; the root, the package manifest, ferry.json and the
// signatures always travel (a few KiB). Every blob carried is verified as
// it is written, the graph before anything is.
func Delta(ctx context.Context, r *Reader, have *Receipt, out string, opts DeltaOptions) (*DeltaResult, error) {
	if r.delta != nil {
		return nil, fmt.Errorf("%s is a delta already: make the delta from the whole package", r.name)
	}
	if have == nil {
		return nil, errors.New("delta: no receipt of what the far side holds")
	}
	// The graph, each manifest verified; the large blobs are listed, not read.
	sum, err := r.walk(ctx, walkOptions{graph: true, skip: func(ocispec.Descriptor) bool { return true }})
	if err != nil {
		return nil, err
	}
	plan, err := planDelta(r, sum, have)
	if err != nil {
		return nil, err
	}
	format := opts.Format
	if format == "" {
		format = FormatFromPath(out)
	}
	res := &DeltaResult{Path: out, Root: r.root, Omitted: len(plan.info.Omitted), OmittedSize: plan.info.OmittedSize()}
	size, err := writeFileAtomic(out, func(w io.Writer) error {
		n, bytes, err := plan.write(ctx, r, w, format, opts.Progress)
		res.Carried, res.CarriedSize = n, bytes
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delta %s: %w", r.name, err)
	}
	res.Size = size
	return res, nil
}

// deltaPlan is what a delta carries and leaves out.
type deltaPlan struct {
	info DeltaInfo
	data []byte
	// carried holds the descriptors (media types known) of what it carries.
	carried map[digest.Digest]ocispec.Descriptor
}

// planDelta decides what a delta of the walked package r leaves out: each
// blob have lists with its size, a manifest or index only with all it
// references, never the root, the package manifest, ferry.json or the
// signatures.
func planDelta(r *Reader, sum *Summary, have *Receipt) (*deltaPlan, error) {
	keep := map[digest.Digest]bool{r.root.Digest: true}
	for _, s := range signatureEntries(r.root.Digest, r.index.Manifests) {
		keep[s.Digest] = true
		kids, err := children(s.MediaType, sum.Nodes[s.Digest].Data)
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			keep[k.Digest] = true
		}
	}
	var root ocispec.Index
	if err := json.Unmarshal(sum.Nodes[r.root.Digest].Data, &root); err != nil {
		return nil, fmt.Errorf("%w: root: %w", ErrCorrupt, err)
	}
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] == KindPackage {
			keep[m.Digest] = true
			var pm ocispec.Manifest
			if err := json.Unmarshal(sum.Nodes[m.Digest].Data, &pm); err != nil {
				return nil, fmt.Errorf("%w: package manifest: %w", ErrCorrupt, err)
			}
			keep[pm.Config.Digest] = true
		}
	}
	descs := map[digest.Digest]ocispec.Descriptor{}
	leave := map[digest.Digest]bool{}
	var visit func(d ocispec.Descriptor) bool
	visit = func(d ocispec.Descriptor) bool {
		if v, ok := leave[d.Digest]; ok {
			return v
		}
		descs[d.Digest] = rootDescriptor(d)
		size, held := have.Blobs[d.Digest]
		out := held && size == d.Size && !keep[d.Digest]
		if n, ok := sum.Nodes[d.Digest]; ok && isContainer(d.MediaType) {
			kids, _ := children(d.MediaType, n.Data) // parsed by the walk
			for _, k := range kids {
				if !visit(k) {
					out = false
				}
			}
		}
		leave[d.Digest] = out
		return out
	}
	for _, d := range r.index.Manifests {
		visit(d)
	}
	p := &deltaPlan{info: DeltaInfo{MediaType: MediaTypeDelta, Base: have.Source, Omitted: []ocispec.Descriptor{}}, carried: map[digest.Digest]ocispec.Descriptor{}}
	for d, out := range leave {
		if out {
			p.info.Omitted = append(p.info.Omitted, descs[d])
		} else {
			p.carried[d] = descs[d]
		}
	}
	slices.SortFunc(p.info.Omitted, func(a, b ocispec.Descriptor) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	var err error
	if p.data, err = json.Marshal(p.info); err != nil {
		return nil, err
	}
	if len(p.data) > MaxManifestSize {
		return nil, fmt.Errorf("%s would list %d blobs left out (%d bytes), more than the %d bytes a package allows it", deltaFileName, len(p.info.Omitted), len(p.data), MaxManifestSize)
	}
	return p, nil
}

// write writes the delta archive: the head of r, ferry-delta.json, then the
// blobs it carries in r's stored order (children before parents), each
// verified by the walk that reads it from r.
func (p *deltaPlan) write(ctx context.Context, r *Reader, w io.Writer, format Format, progress ProgressFunc) (n int, size int64, err error) {
	var frames *frameWriter
	if format == FormatTarZstd {
		if frames, err = newFrameWriter(w); err != nil {
			return 0, 0, err
		}
		defer func() {
			if cerr := frames.Close(); err == nil {
				err = cerr
			}
		}()
		w = frames
	}
	indexData, err := indexJSON(r.index.Manifests)
	if err != nil {
		return 0, 0, err
	}
	aw := &archiveWriter{tw: tar.NewWriter(w), frames: frames, mtime: archiveTime(r.config), prefetch: make([]byte, 4*copyBufferSize)}
	for _, f := range []struct {
		name string
		data []byte
	}{{ConfigFileName, r.configData}, {layoutFileName, layoutFileData}, {indexFileName, indexData}, {deltaFileName, p.data}} {
		if err := aw.file(f.name, f.data); err != nil {
			return 0, 0, err
		}
	}
	if err := aw.dir(blobsDir); err != nil {
		return 0, 0, err
	}
	if err := aw.dir(blobsSHA256Dir); err != nil {
		return 0, 0, err
	}
	var total int64
	for _, d := range p.carried {
		total += d.Size
	}
	rc := *r
	_, err = rc.walk(ctx, walkOptions{
		skip: func(d ocispec.Descriptor) bool { _, ok := p.carried[d.Digest]; return !ok },
		fn: func(d ocispec.Descriptor, rd io.Reader) error {
			desc, ok := p.carried[d.Digest]
			if !ok {
				return nil
			}
			b := &blob{desc: desc, open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(rd), nil }}
			if err := aw.blob(ctx, b); err != nil {
				return err
			}
			n++
			size += desc.Size
			if progress != nil {
				progress(Progress{Phase: PhaseWrite, Desc: desc, Bytes: desc.Size, TotalBytes: total, TotalBlobs: len(p.carried)})
			}
			return nil
		},
	})
	if err != nil {
		return n, size, err
	}
	if n != len(p.carried) {
		return n, size, fmt.Errorf("%w: %d of the %d blobs to carry were found", ErrCorrupt, n, len(p.carried))
	}
	return n, size, aw.tw.Close()
}
