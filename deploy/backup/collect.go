package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/artifact"
)

// content is what a backup covers, read from the registry: every tagged
// manifest and referrer of the repositories chosen and everything they
// reach, the manifests held (each verified), the blobs by descriptor.
type content struct {
	rec *Record
	// nodes are the manifests and indexes, verified; nodeSize their bytes.
	nodes    map[digest.Digest][]byte
	nodeSize int64
	// blobs indexes rec.Blobs by digest.
	blobs map[digest.Digest]int
	// entries are the root's image entries: REPO:TAG or REPO@DIGEST.
	entries []entry
}

type entry struct {
	ref  string
	desc ocispec.Descriptor
	size int64
}

// collect lists the registry's repositories that match, their tags, the
// referrers of what the tags reach, and fetches and verifies every
// manifest and index on the way.
func collect(ctx context.Context, reg registry.Registry, match func(string) bool) (*content, error) {
	c := &content{rec: &Record{MediaType: MediaTypeRecord}, nodes: map[digest.Digest][]byte{}, blobs: map[digest.Digest]int{}}
	var names []string
	if err := artifact.ListRepositories(ctx, reg, func(page []string) error {
		for _, r := range page {
			if match(r) {
				names = append(names, r)
			}
		}
		return nil
	}); err != nil {
		return nil, artifact.ListFailed("list the repositories", err)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := c.repository(ctx, reg, name); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// repository adds one repository: its tags, sorted, each with its graph
// and referrers.
func (c *content) repository(ctx context.Context, reg registry.Registry, name string) error {
	repo, err := reg.Repository(ctx, name)
	if err != nil {
		return err
	}
	var tags []string
	if err := artifact.ListTags(ctx, repo, func(page []string) error { tags = append(tags, page...); return nil }); err != nil {
		return artifact.ListFailed("list the tags of "+name, err)
	}
	if len(tags) == 0 {
		return nil
	}
	sort.Strings(tags)
	idx := len(c.rec.Repositories)
	c.rec.Repositories = append(c.rec.Repositories, Repository{Name: name, Tags: map[string]digest.Digest{}})
	r := &repoWalk{c: c, repo: repo, name: name, idx: idx, seen: map[digest.Digest]bool{}, tagged: map[digest.Digest]bool{}}
	for _, tag := range tags {
		d, err := repo.Resolve(ctx, tag)
		if err != nil {
			return fmt.Errorf("resolve %s:%s: %w", name, tag, err)
		}
		r.tagged[d.Digest] = true
		if err := r.visit(ctx, d); err != nil {
			return fmt.Errorf("%s:%s: %w", name, tag, err)
		}
		c.rec.Repositories[idx].Tags[tag] = d.Digest
		c.entries = append(c.entries, entry{ref: name + ":" + tag, desc: plain(d), size: c.graphSize(d.Digest)})
	}
	for _, d := range r.referrers {
		if r.tagged[d.Digest] {
			continue
		}
		c.rec.Repositories[idx].Referrers = append(c.rec.Repositories[idx].Referrers, d.Digest)
		c.entries = append(c.entries, entry{ref: name + "@" + d.Digest.String(), desc: plain(d), size: c.graphSize(d.Digest)})
	}
	return nil
}

// repoWalk visits one repository's graph.
type repoWalk struct {
	c         *content
	repo      registry.Repository
	name      string
	idx       int
	seen      map[digest.Digest]bool
	tagged    map[digest.Digest]bool
	referrers []ocispec.Descriptor
}

// visit adds d and what it reaches to the repository, children first,
// then the referrers of each manifest.
func (r *repoWalk) visit(ctx context.Context, d ocispec.Descriptor) error {
	if r.seen[d.Digest] {
		return nil
	}
	r.seen[d.Digest] = true
	if d.Digest.Algorithm() != digest.SHA256 || d.Digest.Validate() != nil || d.Size < 0 {
		return fmt.Errorf("%.80q: not a sha256 digest this backup can hold", d.Digest)
	}
	container := isContainer(d.MediaType)
	if container {
		data, ok := r.c.nodes[d.Digest]
		if !ok {
			var err error
			data, err = artifact.FetchManifest(ctx, r.repo, d)
			if errors.Is(err, errdef.ErrNotFound) {
				return fmt.Errorf("%s %s is not held by %s: a graph copied in part cannot be backed up", d.MediaType, d.Digest, r.name)
			}
			if err != nil {
				return err
			}
			if r.c.nodeSize += int64(len(data)); r.c.nodeSize > artifact.MaxGraphSize {
				return fmt.Errorf("the manifests to back up exceed %d bytes: back up fewer repositories at a time", artifact.MaxGraphSize)
			}
			r.c.nodes[d.Digest] = data
		}
		kids, err := children(d.MediaType, data)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		for _, k := range kids {
			if err := r.visit(ctx, k); err != nil {
				return err
			}
		}
	}
	r.c.add(d, r.idx)
	if container {
		err := artifact.ListReferrers(ctx, r.repo, plain(d), "", func(page []ocispec.Descriptor) error {
			r.referrers = append(r.referrers, page...)
			for _, ref := range page {
				if err := r.visit(ctx, ref); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errdef.ErrUnsupported) {
			return fmt.Errorf("referrers of %s: %w", d.Digest, err)
		}
	}
	return nil
}

// add records blob d as held by repository idx.
func (c *content) add(d ocispec.Descriptor, idx int) {
	i, ok := c.blobs[d.Digest]
	if !ok {
		b := Blob{Digest: d.Digest, Size: d.Size}
		if isContainer(d.MediaType) {
			b.MediaType = d.MediaType
		}
		i = len(c.rec.Blobs)
		c.blobs[d.Digest] = i
		c.rec.Blobs = append(c.rec.Blobs, b)
	}
	if !slices.Contains(c.rec.Blobs[i].Repos, idx) {
		c.rec.Blobs[i].Repos = append(c.rec.Blobs[i].Repos, idx)
	}
}

// graphSize adds up the sizes of what d reaches, d included, each blob once.
func (c *content) graphSize(d digest.Digest) int64 {
	seen := map[digest.Digest]bool{}
	var walk func(d digest.Digest) int64
	walk = func(d digest.Digest) int64 {
		if seen[d] {
			return 0
		}
		seen[d] = true
		b := c.rec.Blobs[c.blobs[d]]
		n := b.Size
		if data, ok := c.nodes[d]; ok {
			kids, _ := children(b.MediaType, data)
			for _, k := range kids {
				n += walk(k.Digest)
			}
		}
		return n
	}
	return walk(d)
}

// plain is d as an entry names it: media type, digest, size, artifact type.
func plain(d ocispec.Descriptor) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size, ArtifactType: d.ArtifactType}
}
