package artifact

import (
	"context"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
)

// pkgGraph is a package's graph as readGraph read it from a source, for
// the verbs that look at a package without moving it: Inspect, Verify,
// Sign, ReadSBOMs.
type pkgGraph struct {
	src oras.ReadOnlyTarget
	ref string
	// name is what messages call the package.
	name   string
	root   ocispec.Descriptor
	config *Config
	// index is index.json's entries: the root and its signature manifest.
	index []ocispec.Descriptor
	// Of a package (r), sum is what its walk established, every blob
	// verified; of any other target, plan holds the manifests, indexes and
	// ferry.json read (each verified), and the other blobs to fetch.
	r    *Reader
	sum  *Summary
	plan *Plan
}

// readGraph reads the graph of the package ref names in src. A package
// (*Reader; ref "" or its root) is walked whole, every blob verified and
// ferry.json checked against the graph, reporting PhaseRead events: an
// archive can only be read from its start, and a walk reads it once where
// Fetch would walk it to each blob (see the copy engine). Any other target
// gives its manifests, indexes and ferry.json, each verified; its layers
// are not read.
func readGraph(ctx context.Context, src oras.ReadOnlyTarget, ref string, progress ProgressFunc) (*pkgGraph, error) {
	if r, ok := src.(*Reader); ok && r.isRoot(ref) {
		sum, err := r.Walk(ctx, nil, progress)
		if err != nil {
			return nil, err
		}
		// A delta read alone stops at what it leaves out; ferry.json is
		// checked against the whole graph when the delta is completed.
		if !sum.partial {
			if err := checkConfig(r, sum); err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
		}
		return &pkgGraph{src: src, ref: ref, name: r.name, root: r.root, config: r.config, index: r.Index().Manifests, r: r, sum: sum}, nil
	}
	p, err := planFrom(ctx, src, ref)
	if err != nil {
		return nil, err
	}
	return &pkgGraph{src: src, ref: ref, name: targetName(src, ref), root: p.Root, config: p.Config, index: p.Index, plan: p}, nil
}

// isRoot reports whether ref names the package root ("" does).
func (r *Reader) isRoot(ref string) bool {
	if ref == "" || ref == r.root.Digest.String() {
		return true
	}
	d, err := r.Resolve(context.Background(), ref)
	return err == nil && d.Digest == r.root.Digest
}

// report describes the package: a walked one as read, any other its
// manifests verified and its other blobs counted from their descriptors.
func (g *pkgGraph) report() *Report {
	if g.sum != nil {
		rep := newReport(g.config, g.root, g.index, g.sum.Blobs, g.sum.Size)
		rep.Delta = g.r.Delta()
		return rep
	}
	return g.plan.report()
}

// node returns the verified bytes of a manifest or index of the graph.
func (g *pkgGraph) node(d digest.Digest) ([]byte, bool) {
	if g.sum != nil {
		n, ok := g.sum.Nodes[d]
		return n.Data, ok
	}
	if b, ok := g.plan.Blobs[d]; ok && b.Data != nil {
		return b.Data, true
	}
	return nil, false
}

// signatures reads the signatures the package holds over its root.
func (g *pkgGraph) signatures(ctx context.Context) ([]signature, error) {
	if g.sum != nil {
		sigs, err := localSignatures(g.r, g.sum)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.name, err)
		}
		return sigs, nil
	}
	return g.plan.signatures(ctx, g.src)
}

// checkSignatures returns the valid signatures over the root by keys; an
// error wrapping ErrNoSignature or ErrSignature when there is none.
func (g *pkgGraph) checkSignatures(ctx context.Context, keys []Verifier) ([]VerifiedSignature, error) {
	if g.sum == nil {
		return g.plan.checkSignatures(ctx, g.src, g.ref, keys)
	}
	sigs, err := g.signatures(ctx)
	if err != nil {
		return nil, err
	}
	valid, err := checkSignatures(g.root.Digest, sigs, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.name, err)
	}
	return valid, nil
}
