package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/internal/readahead"
)

// DefaultPushConcurrency is how many small blobs Push uploads at once when
// PushOptions.Concurrency is 0 or less.
const DefaultPushConcurrency = 4

// DefaultPushStreams is how many large blobs Push uploads at once when
// PushOptions.Streams is 0 or less.
const DefaultPushStreams = 8

// PushOptions configures Push. The zero value works.
type PushOptions struct {
	Remote RemoteOptions
	// MountFrom names a repository on the same registry to mount missing
	// blobs from (cross-repository mount) before uploading them.
	MountFrom string
	// Concurrency bounds parallel uploads of small blobs; if ≤ 0,
	// DefaultPushConcurrency.
	Concurrency int
	// Streams is how many large blobs (layers) are uploaded at once; if ≤ 0,
	// DefaultPushStreams. Each stream reads the package on its own — an
	// archive without an index can only be read from its start — taking
	// every Streams-th large blob and passing over the others, so memory
	// stays bounded whatever the blob sizes. A .tar.zst that is one zstd
	// frame (made by zstd or tar --zstd, not ferry) is read by at most two
	// streams: each decompresses all of it.
	Streams int
	// Progress, if set, receives progress reports.
	Progress ProgressFunc
}

// PushResult tells what a push did.
type PushResult struct {
	Root ocispec.Descriptor `json:"root"`
	Ref  string             `json:"ref"`
	// Pushed blobs were uploaded (or mounted); Skipped ones the registry had.
	Pushed      int   `json:"pushed"`
	Skipped     int   `json:"skipped"`
	BytesPushed int64 `json:"bytesPushed"`
	// Unchanged is true when the registry already held the package root
	// and its signatures: only the tags were set, nothing was read from
	// the package, uploaded or counted.
	Unchanged bool `json:"unchanged"`
}

// Push copies a whole package — root index, package manifest, charts,
// images and signatures — to the repository ref names, in one streaming
// pass over the archive, children before parents: Copy from a package to
// a registry. Blobs the registry has are skipped after a HEAD. The root is
// tagged with ref's tag (or, for a digest reference, must have that
// digest); signatures keep their tags. Progress events are PhasePush.
func Push(ctx context.Context, r *Reader, ref string, opts PushOptions) (*PushResult, error) {
	repo, err := opts.Remote.Repository(ref)
	if err != nil {
		return nil, err
	}
	res, err := Copy(ctx, r, "", repo, repo.Reference.Reference, CopyOptions{
		Concurrency: opts.Concurrency, Streams: opts.Streams, MountFrom: opts.MountFrom,
		Progress: withPhase(opts.Progress, PhasePush),
	})
	if err != nil {
		return nil, withCause("push", ref, err)
	}
	return &PushResult{Root: res.Root, Ref: ref, Pushed: res.Copied, Skipped: res.Skipped, BytesPushed: res.BytesCopied, Unchanged: res.Unchanged}, nil
}

// streamCopy is Copy from a package: its blobs to dst in one streaming
// walk (Streams walks in parallel for the large ones), the root tagged tag
// (a digest: no tag, and it must be the root's).
func streamCopy(ctx context.Context, r *Reader, dst store, tag string, opts CopyOptions) (*CopyResult, error) {
	if d, err := digest.Parse(tag); err == nil && d != r.root.Digest {
		return nil, fmt.Errorf("the package root is %s", r.root.Digest)
	}
	p := &pusher{dst: dst, opts: opts, tally: newTally(r.root, opts.Progress)}
	held, err := p.held(ctx, r)
	if err != nil {
		return nil, err
	}
	if held != nil {
		p.res.Unchanged = true
		if err := p.tag(ctx, r, tag, held); err != nil {
			return nil, err
		}
		return p.res, nil
	}
	if r.delta != nil {
		if err := p.checkDelta(ctx, r); err != nil {
			return nil, err
		}
	}
	sum, err := p.walk(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := p.finish(ctx, sum, r, tag); err != nil {
		return nil, err
	}
	return p.res, nil
}

// checkDelta decides, before anything is written, whether the delta r
// can be completed in dst: dst (or the source named) must hold what it
// leaves out (complete), the whole graph down to those blobs must hold,
// with ferry.json — a walk that reads the delta's small blobs and passes
// over its large ones, each verified when uploaded — and every blob left
// out must be as listed, read back. Only then are blobs brought from the
// source named.
func (p *pusher) checkDelta(ctx context.Context, r *Reader) error {
	c, err := p.complete(ctx, r.delta)
	if err != nil {
		return err
	}
	sum, err := r.walk(ctx, walkOptions{graph: true, completed: c.nodes, skip: func(ocispec.Descriptor) bool { return true }})
	if err != nil {
		return err
	}
	if err := checkConfig(r, sum); err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	limit := p.opts.Concurrency
	if limit <= 0 {
		limit = DefaultCopyConcurrency
	}
	if err := c.verify(ctx, p, limit); err != nil {
		return err
	}
	p.completed = c.nodes
	return c.bring(ctx, p.dst)
}

// walk uploads the package's blobs in Streams parallel walks over it: walk i
// uploads every large blob whose rank among the large ones is i modulo
// Streams, and walk 0 also the small ones (holding manifests back). Each
// blob is verified by the walk that uploads it; every walk checks the graph.
// A large blob the registry has is neither read nor verified: the walk that
// owns it asks the registry (HEAD) when it reaches it, and seeks past it.
func (p *pusher) walk(ctx context.Context, r *Reader) (*Summary, error) {
	streams := p.opts.Streams
	if streams <= 0 {
		streams = DefaultPushStreams
	}
	if r.oneFrame {
		// Every walk would decompress the whole archive to find its blobs:
		// two, one of which uploads the small blobs as it goes while the
		// other runs ahead and meets a bad entry (or the end) early.
		streams = min(streams, 2)
	}
	g, gctx := errgroup.WithContext(ctx)
	sums := make([]*Summary, streams)
	// Each stream walks its own copy of the Reader. A walk writes nothing
	// into it: it reads an archive's head again only to compare it with
	// what Open read (setHead), so the copies share the parsed head
	// read-only. (go test -race found walks that parsed the head again, and
	// set the format, into a Reader being copied.)
	for i := range streams {
		rc := r
		if i > 0 {
			cp := *r
			rc = &cp
		}
		var rank int
		skip := func(desc ocispec.Descriptor) bool {
			k := rank
			rank++
			if k%streams != i {
				return true
			}
			// An error here is left to the upload to report.
			has, err := p.dst.blobExists(gctx, desc)
			if has && err == nil {
				p.add(desc, false)
			}
			return has && err == nil
		}
		buf := make([]byte, 1<<20)
		g.Go(func() error {
			fn := func(desc ocispec.Descriptor, rd io.Reader) error {
				if desc.Size > MaxManifestSize {
					// rd is the walker's: it fails instead of ending when the
					// bytes do not match the digest, so a damaged blob's
					// upload is aborted uncommitted. skip asked the registry.
					return p.upload(gctx, desc, func() io.Reader { return rd }, buf)
				}
				if i != 0 {
					return nil
				}
				return p.small(gctx, desc, rd, buf)
			}
			// Walk 0 alone holds the graph's JSON and checks the graph.
			sum, err := rc.walk(gctx, walkOptions{fn: fn, skip: skip, graph: i == 0, completed: p.completed, zeroCopy: true})
			sums[i] = sum
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return sums[0], nil
}

// pusher is one streaming copy of a package to a store, counted in its
// tally.
type pusher struct {
	dst  store
	opts CopyOptions
	*tally
	// completed holds the manifests a delta leaves out, read back from dst.
	completed map[digest.Digest][]byte
}

// small handles one small blob as the archive yields it: one the graph
// check keeps (a manifest, index or signature payload; see graphJSON) waits
// for finish, anything else is uploaded.
func (p *pusher) small(ctx context.Context, desc ocispec.Descriptor, rd io.Reader, buf []byte) error {
	data, err := io.ReadAll(rd) // fails if the bytes do not match the digest
	if err != nil {
		return err
	}
	if graphJSON(data) {
		return nil
	}
	return p.blob(ctx, desc, func() io.Reader { return bytes.NewReader(data) }, buf)
}

// blob uploads one blob unless the registry has it.
func (p *pusher) blob(ctx context.Context, desc ocispec.Descriptor, body func() io.Reader, buf []byte) error {
	if ok, err := p.dst.blobExists(ctx, desc); err != nil {
		return &BlobError{Op: "check blob", Digest: desc.Digest, Err: err}
	} else if ok {
		p.add(desc, false)
		return nil
	}
	return p.upload(ctx, desc, body, buf)
}

// upload uploads one blob (or mounts it from MountFrom).
func (p *pusher) upload(ctx context.Context, desc ocispec.Descriptor, body func() io.Reader, buf []byte) error {
	if err := p.dst.pushBlob(ctx, desc, movingBody(body(), newPartial(p.progress, PhaseCopy, desc)), buf, true); err != nil {
		if ce, ok := isCorruptBlob(err); ok {
			return ce
		}
		return &BlobError{Op: "upload blob", Digest: desc.Digest, Err: err}
	}
	p.add(desc, true)
	return nil
}

// finish pushes what the walks held back, once the whole graph is
// verified: the JSON blobs that are not manifests concurrently, then the
// manifests in stored order (children before parents), then tags.
func (p *pusher) finish(ctx context.Context, sum *Summary, r *Reader, tag string) error {
	g, gctx := errgroup.WithContext(ctx)
	limit := p.opts.Concurrency
	if limit <= 0 {
		limit = DefaultCopyConcurrency
	}
	g.SetLimit(limit)
	var manifests []ocispec.Descriptor
	results := make(chan pushed, len(sum.order))
	for _, d := range sum.order {
		if node, ok := sum.Nodes[d]; ok {
			manifests = append(manifests, node.Descriptor)
			continue
		}
		desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: d, Size: int64(len(sum.json[d]))}
		g.Go(func() error {
			return p.blobConcurrent(gctx, desc, sum.json[d], results)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	close(results)
	for r := range results {
		p.add(r.desc, r.uploaded)
	}
	for _, m := range manifests {
		desc := ocispec.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: m.Size}
		ok, err := p.dst.manifestExists(ctx, desc)
		if err != nil {
			return &BlobError{Op: "check manifest", Digest: desc.Digest, Err: err}
		}
		if ok {
			p.add(desc, false)
			continue
		}
		if err := p.dst.pushManifest(ctx, desc, sum.json[m.Digest]); err != nil {
			return &BlobError{Op: "push manifest", Digest: desc.Digest, Err: err}
		}
		p.add(desc, true)
	}
	return p.tag(ctx, r, tag, sum.json)
}

// held returns the root manifest and signature manifests of the package
// when the destination already holds all of them, by digest; nil when one
// is missing. A registry stores a manifest only once what it references is
// there (distribution refuses one whose blobs or child manifests are
// missing), so the package is then complete in it and nothing needs
// reading or uploading — as oras.CopyGraph skips a node its target has,
// and everything under it. An unchanged re-push costs two GETs and the
// tags' PUTs.
func (p *pusher) held(ctx context.Context, r *Reader) (map[digest.Digest][]byte, error) {
	out := map[digest.Digest][]byte{}
	for _, d := range append([]ocispec.Descriptor{r.root}, signatureEntries(r.root.Digest, r.index.Manifests)...) {
		data, err := p.dst.fetchManifest(ctx, rootDescriptor(d))
		switch {
		case errors.Is(err, errdef.ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, &BlobError{Op: "check manifest", Digest: d.Digest, Err: err}
		}
		out[d.Digest] = data
	}
	return out, nil
}

// tag tags the root with tag (unless the push is by digest) and each
// signature manifest with its cosign tag, as index.json names them (the
// root and at most its signature: checkIndex). manifests holds their bytes.
func (p *pusher) tag(ctx context.Context, r *Reader, tag string, manifests map[digest.Digest][]byte) error {
	type tagged struct {
		desc ocispec.Descriptor
		tag  string
	}
	var tags []tagged
	if _, err := digest.Parse(tag); err != nil && tag != "" {
		tags = append(tags, tagged{rootDescriptor(r.root), tag})
	}
	for _, d := range signatureEntries(r.root.Digest, r.index.Manifests) {
		tags = append(tags, tagged{rootDescriptor(d), d.Annotations[ocispec.AnnotationRefName]})
	}
	for _, t := range tags {
		if err := p.dst.tag(ctx, t.desc, manifests[t.desc.Digest], t.tag); err != nil {
			return fmt.Errorf("tag %s: %w", t.tag, err)
		}
	}
	return nil
}

// pushed is the outcome of one concurrent blob upload.
type pushed struct {
	desc     ocispec.Descriptor
	uploaded bool
}

// blobConcurrent uploads a held blob from a worker; outcomes are reported on
// results and counted by the caller, not concurrently.
func (p *pusher) blobConcurrent(ctx context.Context, desc ocispec.Descriptor, data []byte, results chan<- pushed) error {
	ok, err := p.dst.blobExists(ctx, desc)
	if err != nil {
		return &BlobError{Op: "check blob", Digest: desc.Digest, Err: err}
	}
	if !ok {
		if err := p.dst.pushBlob(ctx, desc, bytes.NewReader(data), nil, false); err != nil {
			return &BlobError{Op: "upload blob", Digest: desc.Digest, Err: err}
		}
	}
	results <- pushed{desc, !ok}
	return nil
}

// rootDescriptor strips a descriptor to what a registry needs to tag it.
func rootDescriptor(d ocispec.Descriptor) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
}

// corruptBlobError is the error of a verifyingReader whose content does
// not match its digest.
func corruptBlobError(d digest.Digest) *BlobError { return corrupt.Blob(d) }

// isCorruptBlob reports whether err is a corruptBlobError, and returns it.
func isCorruptBlob(err error) (*BlobError, bool) { return corrupt.IsBlob(err) }

// verifyingReader yields a blob's bytes from a readahead.Reader that hashes
// them and, instead of a clean EOF, an error when they do not hash to the
// expected digest, so an upload of a damaged blob is aborted before the
// registry could commit it.
type verifyingReader struct {
	pr   *readahead.Reader
	want digest.Digest
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.pr.Read(p)
	if err == io.EOF && digest.NewDigest(v.want.Algorithm(), v.pr.Sum()) != v.want {
		return n, corruptBlobError(v.want)
	}
	return n, err
}
