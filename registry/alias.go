package registry

import (
	"context"
	"fmt"
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

func (x *aliasIndex) add(ctx context.Context, repo string, alias, canonical digest.Digest) error {
	if err := x.d.PutContent(ctx, x.path(repo, alias), []byte(canonical.String()+"\n")); err != nil {
		return fmt.Errorf("digest alias: %w", err)
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

func (x *aliasIndex) remove(ctx context.Context, repo string, alias digest.Digest) error {
	if err := x.d.Delete(ctx, x.path(repo, alias)); err != nil && !notFound(err) {
		return fmt.Errorf("digest alias: %w", err)
	}
	return nil
}
