package artifact

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
)

// The copy engine. Copy is the one way a package moves — Push, Mirror,
// Pull and Verify (of a registry's package) all call it — and it reports
// each blob as one Progress event. Under it, one of three paths, chosen by
// source and destination:
//
//	source                          destination        path
//	a package (*Reader, its root)   any oras target    one streaming walk (push.go): Push, Mirror
//	any other oras target           any oras target    oras.CopyGraph: Mirror's images
//	any oras target                 an *Archive        read by descriptor, then written in order: Pull, Verify (io.Discard)
//
// Reading a package whole, with nothing to copy to, is a verifying walk
// instead (readGraph): Inspect, Verify, Sign and ReadSBOMs of a package.
//
// The three paths survive for measured reasons, held by BenchmarkCopy
// (figures in docs/performance.md). A package archive can only be read
// from its start, so Fetch — what oras.CopyGraph calls for each blob —
// walks the archive to the blob: from a .tar.zst that is one zstd frame
// (tar --zstd), where passing a blob over means decompressing it,
// oras.CopyGraph is several times slower than the streaming walk. The walk
// also checks the whole graph before it stores a manifest, so a damaged
// package leaves nothing tagged. Between targets that read any blob
// directly (a registry, a layout store, memory), oras.CopyGraph is the
// engine, as in oras-go. An archive is written in one canonical order
// (children before parents, see canonicalOrder) so that the same package
// gives the same bytes, which no oras target keeps: an Archive is Copy's
// own destination.

// DefaultCopyConcurrency is how many blobs Copy moves at once when
// CopyOptions.Concurrency is 0 or less.
const DefaultCopyConcurrency = DefaultPushConcurrency

// CopyOptions configures Copy. The zero value works.
type CopyOptions struct {
	// Concurrency bounds the blobs copied at once: between two targets,
	// every blob; from a package, the small ones (Streams bounds the
	// large). If ≤ 0, DefaultCopyConcurrency.
	Concurrency int
	// Streams is how many large blobs a copy from a package moves at
	// once, each stream reading the package on its own (see
	// PushOptions.Streams); if ≤ 0, DefaultPushStreams.
	Streams int
	// MountFrom names a repository of dst's registry to mount missing
	// blobs from (cross-repository mount) before uploading them.
	MountFrom string
	// Progress, if set, receives a PhaseCopy event per blob: copied (with
	// its bytes), found in dst, or mounted from MountFrom (Skipped, no
	// bytes). A ProgressFunc is called from several goroutines.
	Progress ProgressFunc
	// Keys, if set, require a valid signature over the root by one of
	// them, checked before anything is written. Only an Archive
	// destination checks them (Pull); to any other, Copy refuses them:
	// verify first (Verify, or a deploy's verification).
	Keys []Verifier
}

// CopyResult tells what a copy did.
type CopyResult struct {
	// Root is the package root copied.
	Root ocispec.Descriptor `json:"root"`
	// Copied blobs were stored in dst (uploaded, written); Skipped ones dst
	// had, or took from MountFrom.
	Copied      int   `json:"copied"`
	Skipped     int   `json:"skipped"`
	BytesCopied int64 `json:"bytesCopied"`
	// Unchanged is true when dst held the package root and its signature
	// already: only tags were set, nothing read from the package or counted.
	Unchanged bool `json:"unchanged"`
}

// Copy copies the package that srcRef names in src ("" for a package's
// root) — the root, everything it reaches, and the signature manifest
// stored for it (tagged sha256-<hex>.sig, or else among the root's
// referrers) — into dst, the root tagged dstRef (no tag if dstRef is
// empty or a digest, which must then be the root's), the signature with
// its cosign tag. Any two oras targets work: a package (*Reader), a
// registry repository (*remote.Repository), an OCI layout store
// (content/oci), memory (content/memory). Blobs dst has are not copied;
// every blob read is verified against its digest. From a package, it is
// one streaming walk: every blob read once, large ones in parallel streams
// (see the copy engine above).
func Copy(ctx context.Context, src oras.ReadOnlyTarget, srcRef string, dst oras.Target, dstRef string, opts CopyOptions) (*CopyResult, error) {
	if a, ok := dst.(*Archive); ok {
		return a.copyTo(ctx, src, srcRef, opts)
	}
	if len(opts.Keys) > 0 {
		return nil, fmt.Errorf("signature keys for a copy to %T: %w", dst, errdef.ErrUnsupported)
	}
	if r, ok := src.(*Reader); ok && r.isRoot(srcRef) {
		return streamCopy(ctx, r, storeFor(dst, opts.MountFrom), dstRef, opts)
	}
	root, err := src.Resolve(ctx, srcRef)
	if err != nil {
		return nil, WithRef("resolve", targetName(src, srcRef), err)
	}
	if d, err := digest.Parse(dstRef); err == nil && d != root.Digest {
		return nil, fmt.Errorf("the package root is %s", root.Digest)
	}
	t := newTally(root, opts.Progress)
	if err := copyGraph(ctx, src, dst, root, opts, t); err != nil {
		return nil, err
	}
	if _, err := digest.Parse(dstRef); err != nil && dstRef != "" {
		if err := dst.Tag(ctx, root, dstRef); err != nil {
			return nil, fmt.Errorf("tag %s: %w", dstRef, err)
		}
	}
	// The signature travels with its tag, where cosign and Verify look.
	sig, err := findSignature(ctx, src, root)
	switch {
	case errors.Is(err, errdef.ErrNotFound):
		return t.res, nil
	case err != nil:
		return nil, err
	}
	if err := copyGraph(ctx, src, dst, sig, opts, t); err != nil {
		return nil, fmt.Errorf("copy signature %s: %w", sig.Digest, err)
	}
	sigTag := SignatureTag(root.Digest)
	if err := dst.Tag(ctx, sig, sigTag); err != nil {
		return nil, fmt.Errorf("tag %s: %w", sigTag, err)
	}
	return t.res, nil
}

// copyGraph copies the graph rooted at root from src to dst with
// oras.CopyGraph, reporting and counting each blob in t. Nothing is
// counted for what lies under a manifest dst has: oras-go does not look
// there.
func copyGraph(ctx context.Context, src oras.ReadOnlyTarget, dst oras.Target, root ocispec.Descriptor, opts CopyOptions, t *tally) error {
	co := oras.CopyGraphOptions{Concurrency: opts.Concurrency}
	if co.Concurrency <= 0 {
		co.Concurrency = DefaultCopyConcurrency
	}
	if opts.MountFrom != "" {
		co.MountFrom = func(context.Context, ocispec.Descriptor) ([]string, error) { return []string{opts.MountFrom}, nil }
	}
	// oras-go calls these from its workers: tally is safe for that.
	co.PostCopy = func(_ context.Context, d ocispec.Descriptor) error { t.add(d, true); return nil }
	co.OnCopySkipped = func(_ context.Context, d ocispec.Descriptor) error { t.add(d, false); return nil }
	co.OnMounted = func(_ context.Context, d ocispec.Descriptor) error { t.add(d, false); return nil }
	return oras.CopyGraph(ctx, src, dst, root, co)
}

// findSignature returns the signature manifest src holds for root: the
// one cosign's tag names, else, where src lists referrers (a copy by `oras
// copy -r` carries no tag), the root's referrer holding the most
// signatures. errdef.ErrNotFound when there is none.
func findSignature(ctx context.Context, src oras.ReadOnlyTarget, root ocispec.Descriptor) (ocispec.Descriptor, error) {
	sigTag := SignatureTag(root.Digest)
	sig, err := src.Resolve(ctx, sigTag)
	if lister, ok := src.(registry.ReferrerLister); ok && errors.Is(err, errdef.ErrNotFound) {
		if d, ok := signatureReferrer(ctx, lister, src, rootDescriptor(root)); ok {
			return d, nil
		}
	}
	if err != nil && !errors.Is(err, errdef.ErrNotFound) {
		return ocispec.Descriptor{}, fmt.Errorf("look up signature %s: %w", sigTag, err)
	}
	return sig, err
}

// tally counts a copy's blobs and reports each as a PhaseCopy event. It is
// safe for concurrent use.
type tally struct {
	mu       sync.Mutex
	res      *CopyResult
	progress ProgressFunc
}

func newTally(root ocispec.Descriptor, progress ProgressFunc) *tally {
	return &tally{res: &CopyResult{Root: root}, progress: progress}
}

// add counts desc: copied (its bytes moved), or found in the destination.
func (t *tally) add(desc ocispec.Descriptor, copied bool) {
	t.mu.Lock()
	if copied {
		t.res.Copied++
		t.res.BytesCopied += desc.Size
	} else {
		t.res.Skipped++
	}
	t.mu.Unlock()
	if t.progress != nil {
		ev := Progress{Phase: PhaseCopy, Desc: desc, Skipped: !copied}
		if copied {
			ev.Bytes = desc.Size
		}
		t.progress(ev)
	}
}

// withPhase is progress with each event's phase set to phase, so that a
// verb's events are named by what it does (push, pull); nil stays nil.
func withPhase(progress ProgressFunc, phase Phase) ProgressFunc {
	if progress == nil {
		return nil
	}
	return func(ev Progress) {
		ev.Phase = phase
		progress(ev)
	}
}
