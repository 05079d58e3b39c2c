package artifact

import (
	"context"
	"fmt"
	"io"

	"oras.land/oras-go/v2/registry/remote"
)

// VerifyOptions configures Verify and VerifyRemote.
type VerifyOptions struct {
	// Keys are the public keys a signature may be made with; at least one
	// is required.
	Keys []Verifier
	// Remote says how to reach the registry (VerifyRemote).
	Remote RemoteOptions
	// Progress, if set, receives progress reports.
	Progress ProgressFunc
}

// VerifyResult is what a successful verification established.
type VerifyResult struct {
	// Report describes the verified package.
	Report *Report `json:"package"`
	// Signatures are the valid signatures over the root, by key.
	Signatures []VerifiedSignature `json:"signatures"`
}

// Verify checks a package fail-closed: every blob reachable from the root
// re-hashed against its digest in one streaming pass, the graph complete
// and matching ferry.json, AND at least one valid signature over the root
// digest by one of opts.Keys. Any failure is an error saying which:
// ErrCorrupt (blob X does not match its digest, blob X missing, …),
// ErrNoSignature, or ErrSignature (signed by another key, bad signature,
// signature over another digest).
func Verify(ctx context.Context, r *Reader, opts VerifyOptions) (*VerifyResult, error) {
	if len(opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: no public key to verify with", ErrKey)
	}
	rep, sum, err := inspect(ctx, r, opts.Progress)
	if err != nil {
		return nil, err
	}
	sigs, err := localSignatures(r, sum)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Path(), err)
	}
	valid, err := checkSignatures(r.root.Digest, sigs, opts.Keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Path(), err)
	}
	return &VerifyResult{Report: rep, Signatures: valid}, nil
}

// VerifyRemote checks the package ref names in its registry as Verify does
// a local one: the signature first (nothing else is read when it fails),
// then every blob fetched and re-hashed, streaming, nothing written.
func VerifyRemote(ctx context.Context, ref string, opts VerifyOptions) (*VerifyResult, error) {
	if len(opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: no public key to verify with", ErrKey)
	}
	p, repo, err := remotePlan(ctx, ref, opts.Remote)
	if err != nil {
		return nil, err
	}
	valid, err := p.checkSignatures(ctx, repo, ref, opts.Keys)
	if err != nil {
		return nil, err
	}
	if err := p.writeArchive(ctx, io.Discard, FormatTar, opts.Progress); err != nil {
		return nil, fmt.Errorf("verify %s: %w", ref, err)
	}
	var size int64
	for _, b := range p.blobs {
		size += b.desc.Size
	}
	return &VerifyResult{Report: newReport(p.config, p.root, p.index, len(p.blobs), size), Signatures: valid}, nil
}

// checkSignatures verifies a remote package's signatures over its root.
func (p *plan) checkSignatures(ctx context.Context, repo *remote.Repository, ref string, keys []Verifier) ([]VerifiedSignature, error) {
	sigs, err := p.signatures(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if len(sigs) == 0 {
		tag := SignatureTag(p.root.Digest)
		repoName := repo.Reference.Registry + "/" + repo.Reference.Repository
		return nil, fmt.Errorf("%s: %w over the package root %s: none at the tag %s:%s nor among the root's referrers; copy the signature with the package (oras copy -r, regctl image copy --referrers) or copy its tag too (crane copy SOURCE:%s %s:%s)",
			ref, ErrNoSignature, p.root.Digest, repoName, tag, tag, repoName, tag)
	}
	valid, err := checkSignatures(p.root.Digest, sigs, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return valid, nil
}
