package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
)

// SignOptions configures Sign. The zero value works.
type SignOptions struct {
	// Progress, if set, receives progress reports.
	Progress ProgressFunc
}

// SignResult tells what a signing did.
type SignResult struct {
	Root digest.Digest `json:"root"`
	// Signature is the signature manifest now stored for the root.
	Signature ocispec.Descriptor `json:"signature"`
	// Signatures counts the signatures it holds; Added is false when the
	// key had already signed the root and nothing changed.
	Signatures int  `json:"signatures"`
	Added      bool `json:"added"`
}

// Sign signs the root digest of the package that ref names in dst with key
// and stores the signature beside it the way cosign does: a signature
// manifest tagged sha256-<hex>.sig (and an OCI 1.1 referrer of the root),
// through dst's Push and Tag. Existing signatures are kept (another key
// adds one; the same key again changes nothing); the root digest never
// changes.
//
// dst is a package (*Reader; ref "" or its root), verified whole first: an
// archive is written again atomically in its own format, a layout folder
// gets the new blobs and then a new index.json (see Reader.Tag). Or dst is
// any other oras target — a registry repository (*remote.Repository),
// where `cosign verify` then finds the signature, a layout store, memory —
// whose manifests are fetched and verified first.
func Sign(ctx context.Context, dst oras.Target, ref string, key Signer, opts SignOptions) (*SignResult, error) {
	if r, ok := dst.(*Reader); ok && r.delta != nil {
		return nil, fmt.Errorf("%s is a delta: sign the whole package, then make the delta (its signature travels in it)", r.name)
	}
	g, err := readGraph(ctx, dst, ref, opts.Progress)
	if err != nil {
		return nil, err
	}
	existing, err := g.signatures(ctx)
	if err != nil {
		return nil, err
	}
	identity := g.config.Name
	if repo, ok := dst.(*remote.Repository); ok {
		identity = repo.Reference.Registry + "/" + repo.Reference.Repository
	}
	si, res, err := addSignature(key, g.root, identity, g.config, existing)
	if err != nil || !res.Added {
		if old := signatureEntries(g.root.Digest, g.index); err == nil && len(old) > 0 {
			res.Signature = rootDescriptor(old[0])
		}
		return res, err
	}
	if err := storeSignature(ctx, dst, g.root, si, opts.Progress); err != nil {
		return nil, fmt.Errorf("sign %s: %w", g.name, err)
	}
	return res, nil
}

// storeSignature stores a signature manifest for root in dst: its blobs,
// then the manifest with cosign's tag (one request to a registry).
func storeSignature(ctx context.Context, dst oras.Target, root ocispec.Descriptor, si *signatureImage, progress ProgressFunc) error {
	for d, data := range si.blobs {
		if d == si.desc.Digest {
			continue
		}
		desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: d, Size: int64(len(data))}
		if err := dst.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return &BlobError{Op: "upload blob", Digest: d, Err: err}
		}
	}
	tag := SignatureTag(root.Digest)
	manifest := si.blobs[si.desc.Digest]
	var err error
	if rp, ok := dst.(registry.ReferencePusher); ok {
		err = rp.PushReference(ctx, si.desc, bytes.NewReader(manifest), tag)
	} else if err = dst.Push(ctx, si.desc, bytes.NewReader(manifest)); err == nil || errors.Is(err, errdef.ErrAlreadyExists) {
		if pt, ok := dst.(progressTagger); ok {
			err = pt.tag(ctx, si.desc, tag, progress)
		} else {
			err = dst.Tag(ctx, si.desc, tag)
		}
	}
	if err != nil {
		return fmt.Errorf("push signature %s: %w", tag, err)
	}
	return nil
}

// addSignature signs root with key unless key already has a valid
// signature over it among existing, and builds the signature manifest
// holding existing signatures and the new one.
func addSignature(key Signer, root ocispec.Descriptor, identity string, cfg *Config, existing []signature) (*signatureImage, *SignResult, error) {
	res := &SignResult{Root: root.Digest, Signatures: len(existing)}
	if _, err := checkSignatures(root.Digest, existing, []Verifier{key}); err == nil {
		return nil, res, nil
	}
	sig, err := signPayload(key, root.Digest, identity, cfg)
	if err != nil {
		return nil, nil, err
	}
	si, err := newSignatureImage(root, append(existing, sig))
	if err != nil {
		return nil, nil, err
	}
	res.Signature, res.Signatures, res.Added = si.desc, len(existing)+1, true
	return si, res, nil
}

// withSignature returns index with root's signature entries replaced by
// sig, tagged as cosign tags it, at the end.
func withSignature(root digest.Digest, index []ocispec.Descriptor, sig ocispec.Descriptor) []ocispec.Descriptor {
	tag := SignatureTag(root)
	var out []ocispec.Descriptor
	for _, d := range index {
		if d.Digest == root || d.Annotations[ocispec.AnnotationRefName] != tag {
			out = append(out, d)
		}
	}
	s := rootDescriptor(sig)
	s.Annotations = map[string]string{ocispec.AnnotationRefName: tag}
	return append(out, s)
}

// localSignatures reads the signatures a walked package holds for its root.
func localSignatures(r *Reader, sum *Summary) ([]signature, error) {
	var manifests [][]byte
	for _, d := range signatureEntries(r.root.Digest, r.index.Manifests) {
		manifests = append(manifests, sum.Nodes[d.Digest].Data)
	}
	return readSignatures(manifests, func(d ocispec.Descriptor) ([]byte, error) {
		data, ok := sum.json[d.Digest]
		if !ok {
			return nil, fmt.Errorf("%w: signature payload %s is not a JSON document", ErrCorrupt, d.Digest)
		}
		return data, nil
	})
}

// signatures reads the signatures a remote package has for its root.
func (p *Plan) signatures(ctx context.Context, src content.Fetcher) ([]signature, error) {
	var manifests [][]byte
	for _, d := range p.Index[1:] {
		b, ok := p.Blobs[d.Digest]
		if !ok || b.Data == nil {
			return nil, fmt.Errorf("signature manifest %s not fetched", d.Digest)
		}
		manifests = append(manifests, b.Data)
	}
	return readSignatures(manifests, func(d ocispec.Descriptor) ([]byte, error) {
		return FetchManifest(ctx, src, d)
	})
}
