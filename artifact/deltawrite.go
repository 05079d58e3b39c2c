package artifact

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/ferrypkg/ferry/artifact/internal/zstdframe"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Writing a delta: see delta.go.

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
	size, err := WriteFileAtomic(out, func(w io.Writer) error {
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
		kids, err := graph.Children(s.MediaType, sum.Nodes[s.Digest].Data)
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			keep[k.Digest] = true
		}
	}
	var root ocispec.Index
	if err := json.Unmarshal(sum.Nodes[r.root.Digest].Data, &root); err != nil {
		return nil, corruptIn("root", err)
	}
	for _, m := range root.Manifests {
		if m.Annotations[AnnotationKind] == KindPackage {
			keep[m.Digest] = true
			var pm ocispec.Manifest
			if err := json.Unmarshal(sum.Nodes[m.Digest].Data, &pm); err != nil {
				return nil, corruptIn("package manifest", err)
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
		if n, ok := sum.Nodes[d.Digest]; ok && graph.IsContainer(d.MediaType) {
			kids, _ := graph.Children(d.MediaType, n.Data) // parsed by the walk
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
	var frames *zstdframe.Writer
	if format == FormatTarZstd {
		if frames, err = zstdframe.NewWriter(w); err != nil {
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
	aw := &archiveWriter{tw: tar.NewWriter(w), frames: frames, mtime: archiveTime(r.config), prefetch: make([]byte, 4*copyBufferSize), progress: progress}
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
			b := &Blob{Desc: desc, Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(rd), nil }}
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
