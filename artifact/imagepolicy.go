package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
)

// Bounds of the files an image policy names.
const (
	// MaxTrustedRootSize bounds a Sigstore trusted_root.json (the public
	// good instance's is about 10 KiB).
	MaxTrustedRootSize = 1 << 20
)

// ErrImagePolicy means an image does not satisfy the verification policy
// its package names for it; match it with errors.Is (the cause,
// imagesig.ErrNoSignature or imagesig.ErrUnverified, too).
var ErrImagePolicy = errors.New("image policy not satisfied")

// FindPolicy returns the policy named name of policies.
func FindPolicy(policies []imagesig.Policy, name string) *imagesig.Policy {
	for i := range policies {
		if policies[i].Name == name {
			return &policies[i]
		}
	}
	return nil
}

// ImagePolicy returns the policy cfg names for img, or nil when none
// applies. A name cfg does not define is ErrCorrupt.
func ImagePolicy(cfg *Config, img Image) (*imagesig.Policy, error) {
	if img.Policy == "" {
		return nil, nil
	}
	pol := FindPolicy(cfg.ImagePolicies, img.Policy)
	if pol == nil {
		return nil, fmt.Errorf("%w: image %s names policy %.64q, which ferry.json does not carry", ErrCorrupt, img.Ref, img.Policy)
	}
	return pol, nil
}

// VerifyImage checks that img satisfies pol, offline: a signature (and
// the attestations pol names) over the image as stored, over the digest
// the publisher's index had when the package keeps only some of its
// platforms (the original index, carried, must list every platform
// manifest kept), or over every platform manifest kept. entries are the
// package root's entries of the image: its own and its image-signature
// entries (the evidence, and the signed-index carrier); fetch holds them
// and what they reference. The error wraps ErrImagePolicy and names the
// image, the policy and the cause in one line.
func VerifyImage(ctx context.Context, fetch content.Fetcher, pol *imagesig.Policy, img Image, entries []ocispec.Descriptor) (*imagesig.Result, error) {
	r, err := CheckImage(ctx, fetch, pol, img, entries)
	if err != nil {
		return nil, fmt.Errorf("%w: image %s does not satisfy policy %q: %w", ErrImagePolicy, img.Ref, pol.Name, err)
	}
	return r, nil
}

// CheckImage is VerifyImage's decision, its error the bare cause: one
// wrapping imagesig.ErrNoSignature or ErrUnverified is a verdict, any
// other kept the policy from being checked (evidence unreadable). The
// agent's admission calls it with the in-cluster registry as fetch.
func CheckImage(ctx context.Context, fetch content.Fetcher, pol *imagesig.Policy, img Image, entries []ocispec.Descriptor) (*imagesig.Result, error) {
	var evidence []ocispec.Descriptor
	for _, e := range entries {
		if e.Annotations[AnnotationKind] == KindImageSignature && e.Annotations[AnnotationSignedIndex] == "" {
			evidence = append(evidence, e)
		}
	}
	signed := map[digest.Digest]bool{}
	for _, s := range img.Signatures {
		signed[s.Subject] = true
	}
	if len(signed) == 0 {
		if pol.Required {
			return nil, fmt.Errorf("%w: the package carries none (required)", imagesig.ErrNoSignature)
		}
		return &imagesig.Result{Subject: img.Digest}, nil
	}
	var firstErr error
	try := func(subject digest.Digest) *imagesig.Result {
		if !signed[subject] {
			return nil
		}
		r, err := pol.Verify(ctx, fetch, subject, evidence)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return nil
		}
		if len(r.Signers) == 0 {
			return nil
		}
		return r
	}
	// The image as stored, signed.
	if r := try(img.Digest); r != nil {
		return r, nil
	}
	platforms, err := platformManifests(ctx, fetch, img, entries)
	if err != nil {
		return nil, err
	}
	// The publisher's index, signed, of which the package keeps some
	// platforms.
	if img.OriginalDigest != "" && img.OriginalDigest != img.Digest && signed[img.OriginalDigest] {
		if err := keptFrom(ctx, fetch, img, platforms, entries); err != nil {
			if firstErr == nil {
				firstErr = err
			}
		} else if r := try(img.OriginalDigest); r != nil {
			return r, nil
		}
	}
	// Every platform manifest kept, each signed.
	if len(platforms) > 0 && !slices.Contains(platforms, img.Digest) {
		var all *imagesig.Result
		for _, d := range platforms {
			r := try(d)
			if r == nil {
				all = nil
				break
			}
			if all == nil {
				all = &imagesig.Result{Subject: img.Digest}
			}
			all.Signers = appendNew(all.Signers, r.Signers...)
			all.Attestations = appendNew(all.Attestations, r.Attestations...)
		}
		if all != nil {
			return all, nil
		}
	}
	switch {
	case firstErr != nil:
		return nil, firstErr
	case pol.Required:
		return nil, fmt.Errorf("%w over %s, its original digest or each of its platform manifests", imagesig.ErrNoSignature, img.Digest)
	}
	return &imagesig.Result{Subject: img.Digest}, nil
}

// platformManifests returns the platform manifests of img as stored: its
// index's, or its one manifest.
func platformManifests(ctx context.Context, fetch content.Fetcher, img Image, entries []ocispec.Descriptor) ([]digest.Digest, error) {
	mediaType := img.MediaType
	for _, e := range entries {
		if e.Digest == img.Digest && e.MediaType != "" {
			mediaType = e.MediaType // as the package or the registry holds it
		}
	}
	if !graph.IsIndex(mediaType) {
		return []digest.Digest{img.Digest}, nil
	}
	data, err := fetchEntry(ctx, fetch, img.Digest, entries)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", img.Digest, err)
	}
	kids, err := graph.Children(mediaType, data)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", img.Digest, err)
	}
	var out []digest.Digest
	for _, k := range kids {
		out = append(out, k.Digest)
	}
	return out, nil
}

// keptFrom checks that the original index of img, carried by a
// signed-index entry, lists every platform manifest the package keeps.
func keptFrom(ctx context.Context, fetch content.Fetcher, img Image, platforms []digest.Digest, entries []ocispec.Descriptor) error {
	data, err := signedIndexData(ctx, fetch, img.OriginalDigest, entries)
	if err != nil {
		return fmt.Errorf("the signed index %s: %w", img.OriginalDigest, err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("the signed index %s: %w", img.OriginalDigest, err)
	}
	listed := map[digest.Digest]bool{}
	for _, m := range idx.Manifests {
		listed[m.Digest] = true
	}
	for _, d := range platforms {
		if !listed[d] {
			return fmt.Errorf("the signed index %s does not list the platform manifest %s the package keeps", img.OriginalDigest, d)
		}
	}
	return nil
}

// signedIndexData returns the original index orig, the one layer of the
// signed-index carrier among entries.
func signedIndexData(ctx context.Context, fetch content.Fetcher, orig digest.Digest, entries []ocispec.Descriptor) ([]byte, error) {
	for _, e := range entries {
		if e.Annotations[AnnotationSignedIndex] != orig.String() {
			continue
		}
		data, err := FetchManifest(ctx, fetch, e)
		if err != nil {
			return nil, err
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%w: its carrier %s: %w", ErrCorrupt, e.Digest, err)
		}
		if len(m.Layers) != 1 || m.Layers[0].Digest != orig {
			return nil, fmt.Errorf("%w: its carrier %s does not hold it", ErrCorrupt, e.Digest)
		}
		return FetchManifest(ctx, fetch, m.Layers[0])
	}
	return nil, errors.New("not carried")
}

// fetchEntry fetches the manifest-sized blob d that one of entries
// describes.
func fetchEntry(ctx context.Context, fetch content.Fetcher, d digest.Digest, entries []ocispec.Descriptor) ([]byte, error) {
	for _, e := range entries {
		if e.Digest == d {
			return FetchManifest(ctx, fetch, ocispec.Descriptor{MediaType: e.MediaType, Digest: e.Digest, Size: e.Size})
		}
	}
	return nil, fmt.Errorf("%s: %w", d, errNotListed)
}

var errNotListed = errors.New("not listed in the package root")

func appendNew(dst []string, vals ...string) []string {
	for _, v := range vals {
		if !slices.Contains(dst, v) {
			dst = append(dst, v)
		}
	}
	return dst
}
