package artifact

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Keys are the public keys a signature may be made with; at least one
	// is required.
	Keys []Verifier
	// Images also checks every image that names a verification policy
	// against it, offline, from the evidence the package carries (as
	// create did).
	Images bool
	// Progress, if set, receives progress reports.
	Progress ProgressFunc
}

// VerifyResult is what a successful verification established.
type VerifyResult struct {
	// Report describes the verified package.
	Report *Report `json:"package"`
	// Signatures are the valid signatures over the root, by key.
	Signatures []VerifiedSignature `json:"signatures"`
	// Images are the images checked against their policies (with
	// VerifyOptions.Images).
	Images []VerifiedImage `json:"images,omitempty"`
}

// VerifiedImage is an image that satisfied its verification policy.
type VerifiedImage struct {
	Component string `json:"component"`
	Ref       string `json:"ref"`
	Digest    string `json:"digest"`
	Policy    string `json:"policy"`
	// Result says whose signatures and which attestations verified (no
	// signers: the policy does not require one and the image has none).
	Result *imagesig.Result `json:"result"`
}

// Verify checks the package that ref names in src fail-closed: at least
// one valid signature over the root digest by one of opts.Keys, AND every
// blob reachable from the root re-hashed against its digest, the graph
// complete and matching ferry.json. Any failure is an error saying which:
// ErrCorrupt (blob X does not match its digest, blob X missing, …),
// ErrNoSignature, or ErrSignature (signed by another key, bad signature,
// signature over another digest).
//
// src is a package (*Reader; ref "" or its root) — read in one streaming
// pass — or any oras target: a registry repository (*remote.Repository,
// where the signature is looked for at cosign's tag, then among the root's
// referrers), a layout store, memory. There the signature is checked first
// (nothing else is read when it fails), then every blob is fetched and
// re-hashed, streaming, nothing written.
func Verify(ctx context.Context, src oras.ReadOnlyTarget, ref string, opts VerifyOptions) (*VerifyResult, error) {
	if len(opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: no public key to verify with", ErrKey)
	}
	var (
		g     *pkgGraph
		valid []VerifiedSignature
		err   error
	)
	if r, ok := src.(*Reader); ok && r.isRoot(ref) {
		// A package is walked whole, every blob verified as it is read.
		if g, err = readGraph(ctx, src, ref, opts.Progress); err != nil {
			return nil, err
		}
		if valid, err = g.checkSignatures(ctx, opts.Keys); err != nil {
			return nil, err
		}
	} else {
		// Any other target is copied into io.Discard as Pull copies into
		// a file: its manifests and signature checked first (nothing else
		// is read when the signature fails), then every blob fetched and
		// re-hashed.
		a := ArchiveTo(io.Discard, FormatTar)
		a.verb = "verify"
		if _, err = Copy(ctx, src, ref, a, "", CopyOptions{Keys: opts.Keys, Progress: withPhase(opts.Progress, PhaseRead)}); err != nil {
			return nil, err
		}
		g = &pkgGraph{src: src, ref: ref, name: targetName(src, ref), root: a.plan.Root, config: a.plan.Config, index: a.plan.Index, plan: a.plan}
		valid = a.signatures
	}
	res := &VerifyResult{Report: g.report(), Signatures: valid}
	if opts.Images {
		if res.Images, err = g.verifyImages(ctx); err != nil {
			return nil, fmt.Errorf("verify %s: %w", g.name, err)
		}
	}
	return res, nil
}

// verifyImages checks each image of the package that names a policy.
func (g *pkgGraph) verifyImages(ctx context.Context) ([]VerifiedImage, error) {
	data, err := FetchManifest(ctx, g.src, g.root)
	if err != nil {
		return nil, err
	}
	var root ocispec.Index
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, corruptIn("root index", err)
	}
	var out []VerifiedImage
	for _, c := range g.config.Components {
		for _, img := range c.Images {
			pol, err := ImagePolicy(g.config, img)
			if err != nil || pol == nil {
				if err != nil {
					return nil, err
				}
				continue
			}
			var entries []ocispec.Descriptor
			for _, e := range root.Manifests {
				a := e.Annotations
				if a[AnnotationComponent] == c.Name && a[AnnotationImageRef] == img.Ref &&
					(a[AnnotationKind] == KindImageSignature || a[AnnotationKind] == KindImage && e.Digest == img.Digest) {
					entries = append(entries, e)
				}
			}
			r, err := VerifyImage(ctx, g.src, pol, img, entries)
			if err != nil {
				return nil, err
			}
			out = append(out, VerifiedImage{Component: c.Name, Ref: img.Ref, Digest: img.Digest.String(), Policy: pol.Name, Result: r})
		}
	}
	return out, nil
}

// report describes a planned package: its manifests verified, its other
// blobs counted from their descriptors.
func (p *Plan) report() *Report {
	var size int64
	for _, b := range p.Blobs {
		size += b.Desc.Size
	}
	return newReport(p.Config, p.Root, p.Index, len(p.Blobs), size)
}

// checkSignatures verifies the signatures over a planned package's root.
func (p *Plan) checkSignatures(ctx context.Context, src oras.ReadOnlyTarget, ref string, keys []Verifier) ([]VerifiedSignature, error) {
	name := targetName(src, ref)
	sigs, err := p.signatures(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(sigs) == 0 {
		tag := SignatureTag(p.Root.Digest)
		repoName := targetName(src, "")
		return nil, fmt.Errorf("%s: %w over the package root %s: none at the tag %s:%s nor among the root's referrers: %w",
			name, ErrNoSignature, p.Root.Digest, repoName, tag, ErrSignatureLeftBehind)
	}
	valid, err := checkSignatures(p.Root.Digest, sigs, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return valid, nil
}
