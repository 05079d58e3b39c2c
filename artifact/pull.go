package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
)

// PullOptions configures Pull. The zero value works.
type PullOptions struct {
	// Format is the archive format; if empty, taken from the output name.
	Format Format
	// Progress, if set, receives progress reports.
	Progress ProgressFunc
	// Keys, if set, require a valid signature over the root by one of them,
	// checked before anything is written.
	Keys []Verifier
}

// PullResult describes a pulled package.
type PullResult struct {
	Path   string             `json:"path"`
	Root   ocispec.Descriptor `json:"root"`
	Config *Config            `json:"-"`
	Size   int64              `json:"size"`
	Blobs  int                `json:"blobs"`
	// Signatures are the signatures verified with PullOptions.Keys.
	Signatures []VerifiedSignature `json:"signatures,omitempty"`
}

// Pull writes the package that ref names in src (tag or digest; "" for a
// package's root) as an archive at out, atomically: from a registry
// repository (*remote.Repository), an OCI layout store, memory, or another
// package (a layout folder written as a .tar.zst, say). Every blob is
// verified against its digest as it is written; a digest reference is the
// root's. With opts.Keys the signature is checked first, before anything is
// written. Pulling what Push sent gives the same bytes. It is Copy into an
// ArchiveFile: the graph read by descriptor (a package is read through
// Fetch), then written in canonical order.
func Pull(ctx context.Context, src oras.ReadOnlyTarget, ref, out string, opts PullOptions) (*PullResult, error) {
	a := ArchiveFile(out, opts.Format)
	a.verb = "pull"
	res, err := Copy(ctx, src, ref, a, "", CopyOptions{Keys: opts.Keys, Progress: withPhase(opts.Progress, PhasePull)})
	if err != nil {
		return nil, err
	}
	return &PullResult{Path: out, Root: res.Root, Config: a.plan.Config, Size: a.Size(), Blobs: res.Copied, Signatures: a.signatures}, nil
}

// planFrom reads the graph of the package ref names in src (a registry
// repository, a layout store, a package: any oras target) into a plan whose
// large blobs are fetched from src when the plan is written. Manifests,
// indexes, ferry.json and signature payloads are fetched and verified
// (bounded by MaxManifestSize each); the signature is found by cosign's
// tag, else among the root's referrers when src lists them.
func planFrom(ctx context.Context, src oras.ReadOnlyTarget, ref string) (*Plan, error) {
	name := targetName(src, ref)
	root, err := src.Resolve(ctx, ref)
	if err != nil {
		return nil, WithRef("resolve", name, err)
	}
	if d, err := digest.Parse(ref); err == nil && d != root.Digest {
		return nil, fmt.Errorf("%s: the registry answered with %s", name, root.Digest)
	}
	p := &Plan{Blobs: map[digest.Digest]*Blob{}}
	fetch := func(d ocispec.Descriptor) ([]byte, error) {
		if b, ok := p.Blobs[d.Digest]; ok && b.Data != nil {
			return b.Data, nil
		}
		data, err := FetchManifest(ctx, src, d)
		if err != nil {
			return nil, err
		}
		p.Blobs[d.Digest] = &Blob{Desc: rootDescriptor(d), Data: data}
		return data, nil
	}
	rootData, err := fetch(root)
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(rootData, &idx); err != nil || root.MediaType != ocispec.MediaTypeImageIndex || idx.ArtifactType != ArtifactTypePackage {
		return nil, fmt.Errorf("%w: %s is not a ferry package (media type %.64q)", ErrNotPackage, name, root.MediaType)
	}
	root.ArtifactType = ArtifactTypePackage
	p.Root = rootDescriptor(root)
	p.Root.ArtifactType = ArtifactTypePackage
	// ferry.json: root → package manifest → config.
	for _, m := range idx.Manifests {
		if m.Annotations[AnnotationKind] != KindPackage {
			continue
		}
		mdata, err := fetch(m)
		if err != nil {
			return nil, err
		}
		var pm ocispec.Manifest
		if err := json.Unmarshal(mdata, &pm); err != nil || pm.Config.MediaType != MediaTypeConfig {
			return nil, fmt.Errorf("%w: package manifest %s has no ferry config", ErrCorrupt, m.Digest)
		}
		cdata, err := FetchManifest(ctx, src, pm.Config)
		if err != nil {
			return nil, err
		}
		var cfg Config
		if err := json.Unmarshal(cdata, &cfg); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, ConfigFileName, err)
		}
		p.Config, p.ConfigData = &cfg, cdata
		p.Blobs[pm.Config.Digest] = &Blob{Desc: rootDescriptor(pm.Config), Data: cdata}
	}
	if p.Config == nil {
		return nil, fmt.Errorf("%w: %s has no package manifest", ErrCorrupt, name)
	}
	p.Mtime = archiveTime(p.Config)
	// Signatures are found by cosign's tag convention, else among the
	// root's referrers (a copy by `oras copy -r` carries no tag).
	p.Index = []ocispec.Descriptor{p.Root}
	sigTag := SignatureTag(root.Digest)
	sig, err := findSignature(ctx, src, root)
	switch {
	case err == nil:
		sig = rootDescriptor(sig)
		sig.Annotations = map[string]string{ocispec.AnnotationRefName: sigTag}
		if _, err := checkIndex(append([]ocispec.Descriptor{p.Root}, sig)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		data, err := fetch(sig)
		if err != nil {
			return nil, err
		}
		if err := checkSignatureManifest(root.Digest, data, fetch); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, sigTag, err)
		}
		p.Index = append(p.Index, sig)
	case !errors.Is(err, errdef.ErrNotFound):
		return nil, err
	}
	descs, err := graph.CanonicalOrder(p.Index, fetch)
	if err != nil {
		return nil, err
	}
	// Every manifest and index is fetched and verified by now.
	node := func(d digest.Digest) ([]byte, bool) {
		if b, ok := p.Blobs[d]; ok && b.Data != nil {
			return b.Data, true
		}
		return nil, false
	}
	if err := checkSBOMs(&idx, node); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := checkImageSignatures(p.Config, &idx, node); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if missing := checkConfigSBOMs(p.Config, &idx, node); len(missing) > 0 {
		return nil, fmt.Errorf("%s: %w: %s lists what the package does not hold: %s", name, ErrCorrupt, ConfigFileName, corrupt.SomeOf(missing))
	}
	for _, d := range descs {
		if _, ok := p.Blobs[d.Digest]; ok {
			continue
		}
		d := d
		p.Blobs[d.Digest] = &Blob{Desc: d, Open: func(ctx context.Context) (io.ReadCloser, error) { return src.Fetch(ctx, d) }}
	}
	if p.IndexJSON, err = LayoutIndex(p.Root, p.Config.Version, p.Index[1:]); err != nil {
		return nil, err
	}
	return p, nil
}

// signatureReferrer returns the signature manifest among root's referrers
// in repo (OCI 1.1 referrers API, or the referrers tag schema): of several
// (a root signed again leaves the older ones), the one holding the most
// signatures. Any failure to list referrers counts as none.
func signatureReferrer(ctx context.Context, repo registry.ReferrerLister, src content.Fetcher, root ocispec.Descriptor) (ocispec.Descriptor, bool) {
	var best ocispec.Descriptor
	most := 0
	err := ListReferrers(ctx, repo, root, ArtifactTypeSignature, func(refs []ocispec.Descriptor) error {
		for _, d := range refs {
			if d.MediaType != ocispec.MediaTypeImageManifest || d.Size > MaxManifestSize {
				continue
			}
			data, err := FetchManifest(ctx, src, d)
			if err != nil {
				continue
			}
			var m ocispec.Manifest
			if json.Unmarshal(data, &m) != nil {
				continue
			}
			if n := len(m.Layers); n > most || (n == most && n > 0 && d.Digest < best.Digest) {
				best, most = d, n
			}
		}
		return nil
	})
	if err != nil || most == 0 {
		return ocispec.Descriptor{}, false
	}
	return rootDescriptor(best), true
}

// archiveTime is the tar mtime of a package's archive entries: its created
// time, or the Unix epoch when it records none (as Create writes them).
func archiveTime(cfg *Config) time.Time {
	if cfg.Created != "" {
		if t, err := time.Parse(time.RFC3339, cfg.Created); err == nil {
			return t.UTC()
		}
	}
	return time.Unix(0, 0).UTC()
}

// targetName names the package ref names in src in messages: a registry
// reference, a package file with the reference, or the reference alone.
func targetName(src oras.ReadOnlyTarget, ref string) string {
	switch t := src.(type) {
	case *remote.Repository:
		r := t.Reference
		r.Reference = ref
		return r.String()
	case *Reader:
		if ref == "" {
			return t.name
		}
		return t.name + ":" + ref
	}
	return ref
}
