package artifact

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
)

// Mirroring is how a package's images become pullable under their original
// names from a registry that stands in for the registries they came from:
// what `ferry deploy` does for the in-cluster registry, `package mirror`
// for any registry and `registry load` for an offline mirror.

// MirroredImage is one image Mirror made pullable under its original path.
type MirroredImage struct {
	// Ref is the original reference, e.g. docker.io/library/nginx:1.27.
	Ref string `json:"ref"`
	// Repository and Tag are where the mirror serves it: the original path
	// without its registry host (library/nginx, 1.27).
	Repository string `json:"repository"`
	Tag        string `json:"tag,omitempty"`
	Digest     string `json:"digest"`
}

// MirroredRepository is one git repository Mirror put under its path, by
// digest (untagged: nothing names it by a branch).
type MirroredRepository struct {
	URL        string `json:"url"`
	Repository string `json:"repository"`
	Revision   string `json:"revision"`
	Digest     string `json:"digest"`
}

// MirrorResult tells what Mirror put into a registry.
type MirrorResult struct {
	// Package is the repository:tag the whole package was pushed to.
	Package string          `json:"package"`
	Root    string          `json:"root"`
	Images  []MirroredImage `json:"images"`
	// Repositories are the package's git repositories, in the format
	// Flux's OCIRepository reads.
	Repositories []MirroredRepository `json:"repositories,omitempty"`
	// BytesPushed counts the blob bytes uploaded (not those the registry
	// had, nor those mounted from the package's repository).
	BytesPushed int64 `json:"bytesPushed"`
}

// ImagePath is the repository path an image is mirrored under: its
// original path without the registry host, so docker.io/library/nginx:1.27
// becomes library/nginx and ghcr.io/org/app:v1 becomes org/app. A
// containerd or docker mirror for the original registry then finds it.
func ImagePath(ref string) (repo, tag string, err error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", fmt.Errorf("invalid image reference %.80q: %w", ref, err)
	}
	if t, ok := named.(reference.Tagged); ok {
		tag = t.Tag()
	}
	return reference.Path(named), tag, nil
}

// MirrorOptions configures Mirror. The zero value works.
type MirrorOptions struct {
	// Remote says how to reach the registry.
	Remote RemoteOptions
	// Progress, if set, receives a PhasePush event per blob: of the
	// package as Push reports them, then of each image, SBOM and git
	// repository copied (or mounted, Skipped) from the package's
	// repository into its own.
	Progress ProgressFunc
}

// Mirror copies a package into the registry at host (host[:port][/prefix],
// plain HTTP on loopback; a prefix goes before every repository): the
// whole package under its own name (<name>:<version>), streaming, as Push
// does; then each image under its original repository path and tag, by
// the digest the package recorded, with its SBOMs (referrers of its
// platform manifests) and its publisher's signatures and attestations
// (referrers, or tagged sha256-<hex>.sig/.att again as cosign found
// them), and each git repository under its path
// (github.com/org/fleet → org/fleet) by digest: copies between two
// repositories of the registry, mounting blobs from the package's.
func Mirror(ctx context.Context, r *Reader, host string, opts MirrorOptions) (*MirrorResult, error) {
	cfg := r.config
	pkgRepo := cfg.Name
	pkgRef := fmt.Sprintf("%s/%s:%s", host, pkgRepo, cfg.Version)
	src, err := opts.Remote.Repository(pkgRef)
	if err != nil {
		return nil, err
	}
	progress := withPhase(opts.Progress, PhasePush)
	pushed, err := Copy(ctx, r, "", src, cfg.Version, CopyOptions{Progress: progress})
	if err != nil {
		return nil, withCause("push", pkgRef, err)
	}
	res := &MirrorResult{Package: pkgRepo + ":" + cfg.Version, Root: r.root.Digest.String(), BytesPushed: pushed.BytesCopied}
	// What these copies count is not BytesPushed: their blobs are mounted,
	// only a few manifests uploaded.
	copyOpts := CopyOptions{MountFrom: src.Reference.Repository, Progress: progress}
	t := newTally(r.root, progress)
	signedIndexes, err := signedIndexEntries(ctx, src, r.root)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: %w", pkgRef, err)
	}
	seen := map[string]string{} // repo:tag → digest
	for _, c := range r.config.Components {
		for _, g := range c.Repositories {
			dst, err := opts.Remote.Repository(host + "/" + g.Path)
			if err != nil {
				return nil, err
			}
			desc, err := src.Resolve(ctx, g.Digest.String())
			if err == nil {
				err = copyGraph(ctx, src, dst, desc, copyOpts, t)
			}
			if err != nil {
				return nil, fmt.Errorf("mirror git repository %s: %w", g.URL, err)
			}
			res.Repositories = append(res.Repositories, MirroredRepository{URL: g.URL, Repository: g.Path, Revision: g.Revision, Digest: g.Digest.String()})
		}
		for _, img := range c.Images {
			repoPath, tag, err := ImagePath(img.Ref)
			if err != nil {
				return nil, err
			}
			key := repoPath + ":" + tag
			if prev, ok := seen[key]; ok {
				if prev != img.Digest.String() {
					return nil, fmt.Errorf("mirror %s: %s already holds %s from another image of the package", img.Ref, key, prev)
				}
				continue
			}
			seen[key] = img.Digest.String()
			dst, err := opts.Remote.Repository(host + "/" + repoPath)
			if err != nil {
				return nil, err
			}
			desc, err := src.Resolve(ctx, img.Digest.String())
			if err != nil {
				return nil, fmt.Errorf("mirror %s: %w", img.Ref, err)
			}
			if err := copyGraph(ctx, src, dst, desc, copyOpts, t); err != nil {
				return nil, fmt.Errorf("mirror %s: %w", img.Ref, err)
			}
			if tag != "" {
				if err := dst.Tag(ctx, desc, tag); err != nil {
					return nil, fmt.Errorf("mirror %s: tag: %w", img.Ref, err)
				}
			}
			// Its SBOMs, referrers of its platform manifests (there now),
			// so that `oras discover` on the image finds them.
			for _, s := range img.SBOMs {
				sd, err := src.Resolve(ctx, s.Digest.String())
				if err != nil {
					return nil, fmt.Errorf("mirror %s: SBOM %s: %w", img.Ref, s.Digest, err)
				}
				if err := copyGraph(ctx, src, dst, sd, copyOpts, t); err != nil {
					return nil, fmt.Errorf("mirror %s: SBOM %s: %w", img.Ref, s.Digest, err)
				}
			}
			if err := mirrorSignatures(ctx, src, dst, c.Name, img, signedIndexes, copyOpts, t); err != nil {
				return nil, fmt.Errorf("mirror %s: %w", img.Ref, err)
			}
			res.Images = append(res.Images, MirroredImage{Ref: img.Ref, Repository: repoPath, Tag: tag, Digest: img.Digest.String()})
		}
	}
	sort.Slice(res.Images, func(i, j int) bool { return res.Images[i].Ref < res.Images[j].Ref })
	return res, nil
}

// signedIndexEntries lists the root entries carrying an image's original
// index, by component|ref.
func signedIndexEntries(ctx context.Context, src content.Fetcher, root ocispec.Descriptor) (map[string][]ocispec.Descriptor, error) {
	data, err := FetchManifest(ctx, src, root)
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, corruptIn("root", err)
	}
	out := map[string][]ocispec.Descriptor{}
	for _, m := range idx.Manifests {
		a := m.Annotations
		if a[AnnotationKind] == KindImageSignature && a[AnnotationSignedIndex] != "" {
			key := a[AnnotationComponent] + "|" + a[AnnotationImageRef]
			out[key] = append(out[key], m)
		}
	}
	return out, nil
}

// mirrorSignatures copies an image's signatures and attestations from the
// package's repository src into the image's dst: referrers as manifests
// (dst indexes them by subject), tag-scheme evidence tagged again as
// cosign found it, and the carrier of the original index they may sign.
func mirrorSignatures(ctx context.Context, src oras.ReadOnlyTarget, dst oras.Target, component string, img Image, signedIndexes map[string][]ocispec.Descriptor, opts CopyOptions, t *tally) error {
	for _, s := range img.Signatures {
		sd, err := src.Resolve(ctx, s.Digest.String())
		if err == nil {
			err = copyGraph(ctx, src, dst, sd, opts, t)
		}
		if err == nil && s.Tag != "" {
			err = dst.Tag(ctx, sd, s.Tag)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", s.Kind, s.Digest, err)
		}
	}
	for _, d := range signedIndexes[component+"|"+img.Ref] {
		d = ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size, ArtifactType: d.ArtifactType}
		if err := copyGraph(ctx, src, dst, d, opts, t); err != nil {
			return fmt.Errorf("signed index %s: %w", d.Digest, err)
		}
	}
	return nil
}
