package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// Completing a delta where it is pushed: see delta.go.

// ErrMissingBlobs means the destination of a delta lacks blobs the delta
// leaves out; a MissingBlobsError names them.
var ErrMissingBlobs = errors.New("the destination lacks blobs the delta leaves out")

// MissingBlobsError is the refusal of a delta whose destination lacks some
// of the blobs it leaves out, before anything was written.
type MissingBlobsError struct {
	// Missing are the blobs the destination lacks among those asked for,
	// by digest; Omitted is how many the delta leaves out.
	Missing []ocispec.Descriptor
	Omitted int
	// Asked is how many were asked for: all of them, or, when a batch
	// found some missing, those up to that batch (deltaCheckBatch).
	Asked int
	// Source is the repository named to take them from (MountFrom), which
	// lacks them too; empty when none was named.
	Source string
}

// deltaCheckBatch is how many of a delta's blobs left out are asked for
// (HEAD) before the answers are weighed: a batch with a blob missing ends
// the asking, so that a refusal costs one batch, whatever the delta lists.
const deltaCheckBatch = 1024

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
	where := "the destination lacks"
	if e.Source != "" {
		where = "the destination and " + e.Source + " lack"
	}
	of := fmt.Sprintf("the %d", e.Omitted)
	if e.Asked > 0 && e.Asked < e.Omitted {
		of = fmt.Sprintf("the first %d asked for of the %d", e.Asked, e.Omitted)
	}
	return fmt.Sprintf("%s %d of %s blobs the delta leaves out: %s%s", where, len(e.Missing), of, strings.Join(names, ", "), more)
}

func (e *MissingBlobsError) Unwrap() error { return ErrMissingBlobs }

// completion is what complete found of a delta's blobs left out.
type completion struct {
	// nodes holds the manifests and indexes among them, read back, for
	// the graph check.
	nodes map[digest.Digest][]byte
	// blobs are the other blobs left out, read back once the graph holds
	// (a list naming blobs outside the graph costs no more than its
	// manifests).
	blobs []ocispec.Descriptor
	// source is the repository named to take blobs from, and from the
	// blobs the destination lacks that it holds, in the delta's order
	// (fromSource by digest).
	source     *repoStore
	from       []ocispec.Descriptor
	fromSource map[digest.Digest]bool
}

// complete makes sure, before anything is written, that the delta's blobs
// left out are at hand: each is asked for (HEAD) in the destination, and
// those it lacks in the repository the user named as the source
// (MountFrom) — nowhere else: another repository of the registry may be
// another team's, and asking each would cost the registry's size. Those
// found in neither are refused in a MissingBlobsError. Then the manifests
// and indexes among them are read back from where they are and hashed
// (nothing is taken on the registry's word), for the graph check; the
// other blobs are read back once it holds (completion.verify). The asking
// goes in batches (deltaCheckBatch), Concurrency requests at a time: a
// refusal costs one batch, an acceptance a request a blob, nothing that
// grows with the registry.
func (p *pusher) complete(ctx context.Context, d *deltaHead) (*completion, error) {
	limit := p.opts.Concurrency
	if limit <= 0 {
		limit = DefaultCopyConcurrency
	}
	omitted := d.info.Omitted
	c := &completion{}
	if rs, ok := p.dst.(*repoStore); ok {
		var err error
		if c.source, err = rs.source(); err != nil {
			return nil, err
		}
	}
	var lacks []ocispec.Descriptor
	asked := 0
	for asked < len(omitted) && len(lacks) == 0 {
		batch := omitted[asked:min(asked+deltaCheckBatch, len(omitted))]
		asked += len(batch)
		missing, err := lacking(ctx, p.dst, batch, limit)
		if err != nil {
			return nil, err
		}
		if c.source == nil || len(missing) == 0 {
			lacks = missing
			continue
		}
		there, err := lacking(ctx, c.source, missing, limit)
		if err != nil {
			return nil, err
		}
		lacks = there
		nowhere := make(map[digest.Digest]bool, len(there))
		for _, d := range there {
			nowhere[d.Digest] = true
		}
		for _, m := range missing {
			if !nowhere[m.Digest] {
				c.from = append(c.from, m)
			}
		}
	}
	if len(lacks) > 0 {
		e := &MissingBlobsError{Missing: lacks, Omitted: len(omitted), Asked: asked}
		if c.source != nil {
			e.Source = c.source.repo.Reference.Repository
		}
		return nil, e
	}
	var kept int64
	for _, o := range omitted {
		if graph.IsContainer(o.MediaType) {
			if kept += o.Size; o.Size > MaxManifestSize || kept > MaxGraphSize {
				return nil, fmt.Errorf("%w: %s: the manifests it leaves out total more than %d bytes", ErrCorrupt, deltaFileName, MaxGraphSize)
			}
		}
	}
	c.fromSource = make(map[digest.Digest]bool, len(c.from))
	for _, o := range c.from {
		c.fromSource[o.Digest] = true
	}
	c.nodes = map[digest.Digest][]byte{}
	var manifests []ocispec.Descriptor
	for _, o := range omitted {
		if graph.IsContainer(o.MediaType) {
			manifests = append(manifests, o)
		} else {
			c.blobs = append(c.blobs, o)
		}
	}
	nodes, err := p.readBackAll(ctx, c, manifests, limit)
	if err != nil {
		return nil, err
	}
	for i, m := range manifests {
		c.nodes[m.Digest] = nodes[i]
	}
	return c, nil
}

// readBackAll reads back descs (blobs a delta leaves out) from where c found
// them, limit at a time, each checked against its digest; it returns the
// bytes of the manifests and indexes among them. Each counts as skipped.
func (p *pusher) readBackAll(ctx context.Context, c *completion, descs []ocispec.Descriptor, limit int) ([][]byte, error) {
	out := make([][]byte, len(descs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	for i, o := range descs {
		var src store = p.dst
		if c.fromSource[o.Digest] {
			src = c.source
		}
		g.Go(func() error {
			data, err := readBack(gctx, src, o)
			if err != nil {
				return err
			}
			out[i] = data
			p.add(o, false)
			return nil
		})
	}
	return out, g.Wait()
}

// verify reads back the blobs left out that are not manifests, each
// checked against its digest, once the graph down to them holds.
func (c *completion) verify(ctx context.Context, p *pusher, limit int) error {
	_, err := p.readBackAll(ctx, c, c.blobs, limit)
	return err
}

// lacking asks s for each of descs (HEAD), limit at a time, and returns
// those it lacks, in order.
func lacking(ctx context.Context, s store, descs []ocispec.Descriptor, limit int) ([]ocispec.Descriptor, error) {
	has := make([]bool, len(descs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	for i, d := range descs {
		g.Go(func() error {
			ok, err := s.exists(gctx, d)
			if err != nil {
				return &BlobError{Op: "check blob", Digest: d.Digest, Err: err}
			}
			has[i] = ok
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []ocispec.Descriptor
	for i, ok := range has {
		if !ok {
			out = append(out, descs[i])
		}
	}
	return out, nil
}

// source is the repository of s's registry the user named to mount blobs
// from (MountFrom), nil when none was named or it is s's own.
func (s *repoStore) source() (*repoStore, error) {
	if s.mountFrom == "" || s.mountFrom == s.repo.Reference.Repository {
		return nil, nil
	}
	repo, err := remote.NewRepository(s.repo.Reference.Registry + "/" + s.mountFrom)
	if err != nil {
		return nil, fmt.Errorf("the repository to mount from: %w", err)
	}
	repo.PlainHTTP, repo.Client = s.repo.PlainHTTP, s.repo.Client
	return &repoStore{repo: repo}, nil
}

// bring puts into dst the blobs of c that the named source holds and dst
// lacks, each read back and verified already, once the delta's graph is
// checked: blobs mounted (uploaded when the registry does not mount), then
// manifests, children first.
func (c *completion) bring(ctx context.Context, dst store) error {
	if len(c.from) == 0 {
		return nil
	}
	s := dst.(*repoStore)
	src := c.source
	from := make(map[digest.Digest]bool, len(c.from))
	for _, o := range c.from {
		from[o.Digest] = true
	}
	var manifests []ocispec.Descriptor
	for _, o := range c.from {
		if graph.IsContainer(o.MediaType) {
			manifests = append(manifests, o)
			continue
		}
		getContent := func() (io.ReadCloser, error) { return src.repo.Fetch(ctx, o) }
		if err := s.repo.Mount(ctx, o, src.repo.Reference.Repository, getContent); err != nil {
			return &BlobError{Op: "mount blob", Digest: o.Digest, Err: err}
		}
	}
	height := map[digest.Digest]int{}
	var h func(d digest.Digest, mediaType string) int
	h = func(d digest.Digest, mediaType string) int {
		if v, ok := height[d]; ok {
			return v
		}
		height[d] = 0
		kids, _ := graph.Children(mediaType, c.nodes[d])
		for _, k := range kids {
			if from[k.Digest] && graph.IsContainer(k.MediaType) {
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
		if err := s.pushManifest(ctx, m, c.nodes[m.Digest]); err != nil {
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
	if graph.IsContainer(desc.MediaType) {
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
