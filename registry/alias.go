package registry

import (
	"context"
	"fmt"
	"path"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
)

// distribution v3.1.2 stores and verifies manifests by sha256 only: a PUT to
// /manifests/sha512:<hex> fails with DIGEST_INVALID. aliasIndex lets ferry
// accept them: the handler verifies the sha512 digest itself, stores the
// manifest under its sha256 digest, and records sha512 → sha256 here so GET,
// HEAD and DELETE by the sha512 digest find it.
//
// Each alias is one object on the registry's storage driver,
// <sideDir>/<repository>/_aliases/<alg>/<hex>, holding the sha256 digest:
// every registry on the same storage (replicas, processes on one bucket)
// sees it, and nothing is kept in memory.
//
// Each alias also gets a manifest revision link in distribution's own
// layout, _manifests/revisions/<alg>/<hex>/link holding the sha256 digest —
// what distribution writes itself for a blob uploaded by a sha512 digest
// (linkedBlobStore.linkBlob with aliases). distribution's manifest service
// then finds the manifest by its sha512 digest too: an image index whose
// children are named by sha512 digests passes its check that every child
// exists (OCI distribution-spec v1.1, "Pushing Manifests": a registry MAY
// reject a manifest whose references are unknown, and must accept one whose
// references it holds), where it was refused with MANIFEST_BLOB_UNKNOWN.
type aliasIndex struct {
	d storagedriver.StorageDriver
}

// sideDir is where ferry's own records live on the storage, beside
// distribution's /docker. Repository name components never start with "_",
// so a repository's _aliases and _referrers can not collide with another
// repository's path.
const sideDir = "/ferry/repositories"

func repoSideDir(repo, kind string) string { return sideDir + "/" + repo + "/" + kind }

func (x *aliasIndex) path(repo string, alias digest.Digest) string {
	return repoSideDir(repo, "_aliases") + "/" + string(alias.Algorithm()) + "/" + alias.Encoded()
}

// repositoriesDir is where distribution keeps its repositories.
const repositoriesDir = "/docker/registry/v2/repositories"

// revisionLink is distribution's manifest revision link of d in repo.
func revisionLink(repo string, d digest.Digest) string {
	return repositoriesDir + "/" + repo + "/_manifests/revisions/" + string(d.Algorithm()) + "/" + d.Encoded() + "/link"
}

func (x *aliasIndex) add(ctx context.Context, repo string, alias, canonical digest.Digest) error {
	if err := x.d.PutContent(ctx, x.path(repo, alias), []byte(canonical.String()+"\n")); err != nil {
		return fmt.Errorf("digest alias: %w", err)
	}
	if err := x.d.PutContent(ctx, revisionLink(repo, alias), []byte(canonical.String())); err != nil {
		return fmt.Errorf("digest alias: %w", err)
	}
	return nil
}

// ensureLinks gives every alias among ds that repo records a revision link,
// for aliases recorded before ferry wrote them: an image index that names
// such a manifest by its alias is then accepted.
func (x *aliasIndex) ensureLinks(ctx context.Context, repo string, ds []digest.Digest) error {
	for _, d := range ds {
		if d.Validate() != nil || d.Algorithm() == digest.Canonical {
			continue
		}
		if _, err := x.d.Stat(ctx, revisionLink(repo, d)); err == nil || !notFound(err) {
			continue
		}
		canonical, ok := x.lookup(ctx, repo, d)
		if !ok {
			continue
		}
		if err := x.d.PutContent(ctx, revisionLink(repo, d), []byte(canonical.String())); err != nil {
			return fmt.Errorf("digest alias: %w", err)
		}
	}
	return nil
}

// lookup returns the sha256 digest alias stands for in repo. A missing or
// unreadable record is no alias.
func (x *aliasIndex) lookup(ctx context.Context, repo string, alias digest.Digest) (digest.Digest, bool) {
	b, err := x.d.GetContent(ctx, x.path(repo, alias))
	if err != nil {
		return "", false
	}
	d, err := digest.Parse(strings.TrimSpace(string(b)))
	return d, err == nil
}

// pointingAt returns the aliases repo records for canonical.
func (x *aliasIndex) pointingAt(ctx context.Context, repo string, canonical digest.Digest) ([]digest.Digest, error) {
	var out []digest.Digest
	err := x.d.Walk(ctx, repoSideDir(repo, "_aliases"), func(fi storagedriver.FileInfo) error {
		if fi.IsDir() {
			return nil
		}
		b, err := x.d.GetContent(ctx, fi.Path())
		if err != nil || strings.TrimSpace(string(b)) != canonical.String() {
			return nil
		}
		alg, hex := path.Base(path.Dir(fi.Path())), path.Base(fi.Path())
		if d, err := digest.Parse(alg + ":" + hex); err == nil {
			out = append(out, d)
		}
		return nil
	})
	if err != nil && !notFound(err) {
		return nil, fmt.Errorf("digest alias: %w", err)
	}
	return out, nil
}

func (x *aliasIndex) remove(ctx context.Context, repo string, alias digest.Digest) error {
	// The link first: a revision link left without its alias record would
	// make garbage collection mark a manifest it can no longer read.
	for _, p := range []string{path.Dir(revisionLink(repo, alias)), x.path(repo, alias)} {
		if err := x.d.Delete(ctx, p); err != nil && !notFound(err) {
			return fmt.Errorf("digest alias: %w", err)
		}
	}
	return nil
}
