package registry

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/internal/atomicfile"
)

// distribution v3.1.2 stores and verifies manifests by sha256 only: a PUT to
// /manifests/sha512:<hex> fails with DIGEST_INVALID. aliasIndex lets ferry
// accept them: the handler verifies the sha512 digest itself, stores the
// manifest under its sha256 digest, and records sha512 → sha256 here so GET,
// HEAD and DELETE by the sha512 digest find it.
//
// With a directory each alias is one file,
// <dir>/<escaped repository>/<alg>/<hex>, holding the sha256 digest.
type aliasIndex struct {
	dir string
	mu  sync.RWMutex
	m   map[string]map[digest.Digest]digest.Digest
}

func newAliasIndex(root string) (*aliasIndex, error) {
	x := &aliasIndex{m: map[string]map[digest.Digest]digest.Digest{}}
	if root == "" {
		return x, nil
	}
	x.dir = filepath.Join(root, "ferry", "digests")
	err := filepath.WalkDir(x.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(x.dir, p)
		if err != nil {
			return err
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 3 {
			return nil
		}
		repo, err := url.PathUnescape(parts[0])
		if err != nil {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		canonical, err := digest.Parse(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		x.put(repo, digest.NewDigestFromEncoded(digest.Algorithm(parts[1]), parts[2]), canonical)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("registry: digest aliases %s: %w", x.dir, err)
	}
	return x, nil
}

func (x *aliasIndex) put(repo string, alias, canonical digest.Digest) {
	if x.m[repo] == nil {
		x.m[repo] = map[digest.Digest]digest.Digest{}
	}
	x.m[repo][alias] = canonical
}

func (x *aliasIndex) file(repo string, alias digest.Digest) string {
	return filepath.Join(x.dir, url.PathEscape(repo), string(alias.Algorithm()), alias.Encoded())
}

func (x *aliasIndex) add(repo string, alias, canonical digest.Digest) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.dir != "" {
		if err := writeFileAtomic(x.file(repo, alias), []byte(canonical.String()+"\n")); err != nil {
			return fmt.Errorf("digest alias: %w", err)
		}
	}
	x.put(repo, alias, canonical)
	return nil
}

func (x *aliasIndex) lookup(repo string, alias digest.Digest) (digest.Digest, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	d, ok := x.m[repo][alias]
	return d, ok
}

func (x *aliasIndex) remove(repo string, alias digest.Digest) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.dir != "" {
		if err := os.Remove(x.file(repo, alias)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("digest alias: %w", err)
		}
	}
	delete(x.m[repo], alias)
	return nil
}

// writeFileAtomic writes b to p (its folder made if needed) as
// atomicfile.Write does: whole or not at all.
func writeFileAtomic(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	_, err := atomicfile.Write(p, 0o644, func(w io.Writer) error { _, err := w.Write(b); return err })
	return err
}
