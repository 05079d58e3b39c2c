package artifact

import (
	"bytes"
	"context"
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

// Completing a delta where it is pushed: see delta.go.

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
	return fmt.Sprintf("the destination lacks %d of the %d blobs the delta leaves out: %s%s", len(e.Missing), e.Omitted, strings.Join(names, ", "), more)
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
