package artifact

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
)

// MediaTypeReceipt is the media type of a receipt.
const MediaTypeReceipt = "application/vnd.ferry.receipt.v1+json"

// Receipt lists the blobs a far side holds — a registry, a package — by
// digest with their sizes: what a delta need not carry (Delta). It is small
// JSON (about 80 bytes a blob), to be carried back across the air gap,
// plain or signed (SignReceipt). Nothing in it is trusted: a blob it lists
// wrongly is found missing or damaged when the delta is pushed, before
// anything is written.
type Receipt struct {
	MediaType string `json:"mediaType"`
	// Source says what the receipt was made from: a registry host, a
	// package file, a package reference.
	Source string `json:"source"`
	// Created is when it was made (RFC 3339, UTC).
	Created string `json:"created,omitempty"`
	// Blobs are the blobs held, by digest, with their sizes.
	Blobs map[digest.Digest]int64 `json:"blobs"`
}

func newReceipt(source string) *Receipt {
	return &Receipt{MediaType: MediaTypeReceipt, Source: source, Created: time.Now().UTC().Format(time.RFC3339), Blobs: map[digest.Digest]int64{}}
}

// MaxReceiptSize bounds a receipt read from a file (64 MiB: about 800,000
// blobs).
const MaxReceiptSize = 64 << 20

// ParseReceipt reads a receipt, checking its media type and every digest.
func ParseReceipt(data []byte) (*Receipt, error) {
	if len(data) > MaxReceiptSize {
		return nil, fmt.Errorf("receipt is %d bytes, more than %d", len(data), MaxReceiptSize)
	}
	var rc Receipt
	if err := json.Unmarshal(data, &rc); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	if rc.MediaType != MediaTypeReceipt {
		return nil, fmt.Errorf("not a receipt: media type %.64q, not %s", rc.MediaType, MediaTypeReceipt)
	}
	for d, size := range rc.Blobs {
		if err := graph.CheckDescriptor(ocispec.Descriptor{Digest: d, Size: size}); err != nil {
			return nil, fmt.Errorf("receipt: %w", err)
		}
	}
	if rc.Blobs == nil {
		rc.Blobs = map[digest.Digest]int64{}
	}
	return &rc, nil
}

// Marshal is the receipt as it is written: indented JSON, digests sorted.
func (rc *Receipt) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// Size adds up the sizes of the blobs the receipt lists.
func (rc *Receipt) Size() int64 {
	var n int64
	for _, s := range rc.Blobs {
		n += s
	}
	return n
}

// SignReceipt signs a receipt's bytes as written: the detached signature,
// base64 (as cosign sign-blob writes it).
func SignReceipt(data []byte, key Signer) ([]byte, error) {
	sig, err := key.SignPayload(data)
	if err != nil {
		return nil, fmt.Errorf("sign receipt: %w", err)
	}
	return []byte(base64.StdEncoding.EncodeToString(sig) + "\n"), nil
}

// VerifyReceipt checks a detached signature (base64) over a receipt's
// bytes by one of keys; it returns the key that made it, or an error
// wrapping ErrSignature.
func VerifyReceipt(data, sig []byte, keys []Verifier) (Verifier, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no public key to verify with", ErrKey)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
	if err != nil {
		return nil, fmt.Errorf("%w: the receipt's signature is not base64: %w", ErrSignature, err)
	}
	for _, k := range keys {
		if k.VerifyPayload(data, raw) == nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("%w: the receipt's signature is by none of %s", ErrSignature, keyNames(keys))
}

// Have lists what a package holds: the package ref names in src ("" for a
// package's root) — a package on disk (*Reader; its small blobs and the
// graph verified, its large ones listed) or one in a registry or any oras
// target (its manifests fetched and verified, the rest listed from their
// descriptors) — with its signature.
func Have(ctx context.Context, src oras.ReadOnlyTarget, ref string) (*Receipt, error) {
	if r, ok := src.(*Reader); ok && r.isRoot(ref) {
		if r.delta != nil {
			return nil, fmt.Errorf("%s is a delta: it does not hold all of its package", r.name)
		}
		sizes := map[digest.Digest]int64{}
		rc := *r
		_, err := rc.walk(ctx, walkOptions{
			graph: true,
			fn:    func(d ocispec.Descriptor, _ io.Reader) error { sizes[d.Digest] = d.Size; return nil },
			skip:  func(d ocispec.Descriptor) bool { sizes[d.Digest] = d.Size; return true },
		})
		if err != nil {
			return nil, err
		}
		out := newReceipt(r.name)
		out.Blobs = sizes
		return out, nil
	}
	p, err := planFrom(ctx, src, ref)
	if err != nil {
		return nil, err
	}
	out := newReceipt(targetName(src, ref))
	for d, b := range p.Blobs {
		out.Blobs[d] = b.Desc.Size
	}
	return out, nil
}

// HaveRegistry lists what a registry holds: every tag of every repository
// its catalog lists (only those under prefix, when set), and everything
// their manifests reach, each manifest fetched and verified. A registry
// whose catalog is closed (a registry that does not serve /v2/_catalog)
// cannot be listed this way: list its packages with Have.
func HaveRegistry(ctx context.Context, reg registry.Registry, name, prefix string) (*Receipt, error) {
	return haveRepositories(ctx, reg, name, func(r string) bool {
		return prefix == "" || r == prefix || strings.HasPrefix(r, strings.TrimSuffix(prefix, "/")+"/")
	})
}

// HaveRepository lists what one repository of a registry holds, as
// HaveRegistry lists it, but that repository alone: a prefix takes the
// repositories under it too (app/tools under app). A delta is completed in
// the repository it is pushed to and asks no other (MountFrom aside), so
// this is the receipt a delta for that repository can count on. A
// repository the catalog does not list holds nothing: its receipt is
// empty.
func HaveRepository(ctx context.Context, reg registry.Registry, name, repository string) (*Receipt, error) {
	return haveRepositories(ctx, reg, name, func(r string) bool { return r == repository })
}

// haveRepositories lists what the repositories the catalog lists and
// match takes hold.
func haveRepositories(ctx context.Context, reg registry.Registry, name string, match func(repository string) bool) (*Receipt, error) {
	out := newReceipt(name)
	seen := map[digest.Digest]bool{}
	var repos []string
	if err := ListRepositories(ctx, reg, func(page []string) error {
		for _, r := range page {
			if match(r) {
				repos = append(repos, r)
			}
		}
		return nil
	}); err != nil {
		return nil, ListFailed("list the repositories of "+name, err)
	}
	for _, name := range repos {
		repo, err := reg.Repository(ctx, name)
		if err != nil {
			return nil, err
		}
		var tags []string
		if err := ListTags(ctx, repo, func(page []string) error { tags = append(tags, page...); return nil }); err != nil {
			return nil, ListFailed("list the tags of "+name, err)
		}
		var visit func(d ocispec.Descriptor) error
		visit = func(d ocispec.Descriptor) error {
			if err := graph.CheckDescriptor(d); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if seen[d.Digest] {
				return nil
			}
			if !graph.IsContainer(d.MediaType) {
				seen[d.Digest] = true
				out.Blobs[d.Digest] = d.Size
				return nil
			}
			data, err := FetchManifest(ctx, repo, d)
			if errors.Is(err, errdef.ErrNotFound) {
				return nil // a child of an index copied in part: not held
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if digest.SHA256.FromBytes(data) != d.Digest {
				return fmt.Errorf("%s: %w", name, corruptBlobError(d.Digest))
			}
			seen[d.Digest] = true
			out.Blobs[d.Digest] = d.Size
			kids, err := graph.Children(d.MediaType, data)
			if err != nil {
				return fmt.Errorf("%s: manifest %s: %w", name, d.Digest, err)
			}
			for _, k := range kids {
				if err := visit(k); err != nil {
					return err
				}
			}
			return nil
		}
		for _, tag := range tags {
			d, err := repo.Resolve(ctx, tag)
			if err != nil {
				return nil, fmt.Errorf("resolve %s:%s: %w", name, tag, err)
			}
			if err := visit(d); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
