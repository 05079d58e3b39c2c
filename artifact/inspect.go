package artifact

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
)

// Report is what inspect tells about a package.
type Report struct {
	Name        string        `json:"name"`
	Version     string        `json:"version"`
	Description string        `json:"description,omitempty"`
	Created     string        `json:"created,omitempty"`
	Root        digest.Digest `json:"root"`
	Platforms   []string      `json:"platforms"`
	Components  []Component   `json:"components"`
	// ImagePolicies are the image verification policies ferry.json
	// carries (images name them).
	ImagePolicies []imagesig.Policy `json:"imagePolicies,omitempty"`
	// TotalSize adds up every item as listed, shared blobs counted each time;
	// StoredSize counts each distinct blob once, as the package stores it.
	TotalSize  int64 `json:"totalSize"`
	StoredSize int64 `json:"storedSize"`
	Blobs      int   `json:"blobs"`
	// Signatures lists the signature manifests stored for the root digest.
	Signatures []digest.Digest `json:"signatures"`
	Signed     bool            `json:"signed"`
	// Delta is set for a delta: the blobs it leaves out, which must come
	// from the registry it is pushed to. Blobs and StoredSize count what
	// it carries.
	Delta *DeltaInfo `json:"delta,omitempty"`
}

// Inspect reports on the package that ref names in src. A package
// (*Reader; ref "" or its root) is read whole, every blob and the graph
// verified, and ferry.json checked against the graph: every image, chart,
// manifest and file it lists must be held under the root with the digest
// it records. From any other oras target (a registry repository, a layout
// store) only manifests, indexes and ferry.json are read, each verified;
// layers are counted from their descriptors, not fetched (Verify reads
// them).
func Inspect(ctx context.Context, src oras.ReadOnlyTarget, ref string, progress ProgressFunc) (*Report, error) {
	g, err := readGraph(ctx, src, ref, progress)
	if err != nil {
		return nil, err
	}
	return g.report(), nil
}

// newReport builds a report from a package's config and index.json entries.
func newReport(cfg *Config, root ocispec.Descriptor, index []ocispec.Descriptor, blobs int, stored int64) *Report {
	rep := &Report{
		Name: cfg.Name, Version: cfg.Version, Description: cfg.Description, Created: cfg.Created,
		Root: root.Digest, Platforms: cfg.Platforms, Components: cfg.Components, ImagePolicies: cfg.ImagePolicies,
		StoredSize: stored, Blobs: blobs, Signatures: []digest.Digest{}, TotalSize: claimedSize(cfg),
	}
	for _, d := range signatureEntries(root.Digest, index) {
		rep.Signatures = append(rep.Signatures, d.Digest)
	}
	rep.Signed = len(rep.Signatures) > 0
	return rep
}

// checkConfig cross-checks ferry.json against the verified graph.
func checkConfig(r *Reader, sum *Summary) error {
	var root ocispec.Index
	if err := json.Unmarshal(sum.Nodes[r.root.Digest].Data, &root); err != nil {
		return corruptIn("root", err)
	}
	if root.Annotations[AnnotationPackageName] != r.config.Name || root.Annotations[AnnotationPackageVersion] != r.config.Version {
		return fmt.Errorf("%w: %s names %.64q %.64q, the root %.64q %.64q", ErrCorrupt, ConfigFileName, r.config.Name, r.config.Version,
			root.Annotations[AnnotationPackageName], root.Annotations[AnnotationPackageVersion])
	}
	entries := map[string]bool{}
	var layers map[digest.Digest]bool
	for _, m := range root.Manifests {
		a := m.Annotations
		switch a[AnnotationKind] {
		case KindImage:
			entries[KindImage+"|"+a[AnnotationComponent]+"|"+a[AnnotationImageRef]+"|"+m.Digest.String()] = true
		case KindChart:
			entries[KindChart+"|"+a[AnnotationComponent]+"|"+m.Digest.String()] = true
		case KindGit:
			var gm ocispec.Manifest
			if err := json.Unmarshal(sum.Nodes[m.Digest].Data, &gm); err != nil {
				return fmt.Errorf("%w: git repository %s: %w", ErrCorrupt, a[AnnotationGitURL], err)
			}
			entries[KindGit+"|"+a[AnnotationComponent]+"|"+a[AnnotationGitURL]+"|"+m.Digest.String()+"|"+gm.Annotations[ocispec.AnnotationRevision]] = true
		case KindPackage:
			var pm ocispec.Manifest
			if err := json.Unmarshal(sum.Nodes[m.Digest].Data, &pm); err != nil {
				return corruptIn("package manifest", err)
			}
			layers = map[digest.Digest]bool{}
			for _, l := range pm.Layers {
				layers[l.Digest] = true
			}
		}
	}
	node := func(d digest.Digest) ([]byte, bool) { n, ok := sum.Nodes[d]; return n.Data, ok }
	if err := checkSBOMs(&root, node); err != nil {
		return err
	}
	if err := checkImageSignatures(r.config, &root, node); err != nil {
		return err
	}
	missing := checkConfigSBOMs(r.config, &root, node)
	for _, c := range r.config.Components {
		for _, i := range c.Images {
			if !entries[KindImage+"|"+c.Name+"|"+i.Ref+"|"+i.Digest.String()] {
				missing = append(missing, fmt.Sprintf("image %s@%s", i.Ref, i.Digest))
			}
		}
		for _, h := range c.Charts {
			if !entries[KindChart+"|"+c.Name+"|"+h.Digest.String()] {
				missing = append(missing, fmt.Sprintf("chart %s@%s", h.Name, h.Digest))
			}
		}
		for _, m := range c.Manifests {
			if !layers[m.Digest] {
				missing = append(missing, fmt.Sprintf("manifests %s@%s", m.Name, m.Digest))
			}
		}
		for _, f := range c.Files {
			if !layers[f.Digest] {
				missing = append(missing, fmt.Sprintf("file %s@%s", f.Target, f.Digest))
			}
		}
		for _, a := range c.Advisories {
			if !layers[a.Digest] {
				missing = append(missing, fmt.Sprintf("advisories %s@%s", a.Source, a.Digest))
			}
		}
		for _, g := range c.Repositories {
			if !entries[KindGit+"|"+c.Name+"|"+g.URL+"|"+g.Digest.String()+"|"+g.Revision] || !strings.HasSuffix(g.Revision, "sha1:"+g.Commit) {
				missing = append(missing, fmt.Sprintf("git repository %s at %s (%s)", g.URL, g.Revision, g.Digest))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s lists what the package does not hold: %s", ErrCorrupt, ConfigFileName, corrupt.SomeOf(missing))
	}
	return nil
}

// ReadConfig reads the config (ferry.json) of the package that ref names in
// src, a registry repository or any oras target: its root, manifests and
// config are fetched and each checked against its digest, the graph against
// the config; layers are not read. It verifies no signature.
func ReadConfig(ctx context.Context, src oras.ReadOnlyTarget, ref string) (*Config, ocispec.Descriptor, error) {
	p, err := planFrom(ctx, src, ref)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	return p.Config, p.Root, nil
}
