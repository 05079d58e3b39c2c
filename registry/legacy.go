package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Before the side records went through the storage driver, a filesystem
// registry kept them as files of its own under the root, with the
// repository's name path-escaped (which the driver's paths do not allow):
//
//	<root>/ferry/digests/<escaped repository>/<alg>/<hex>
//	<root>/ferry/referrers/<escaped repository>/<subject alg>/<subject hex>/<alg>-<hex>.json
//
// migrateLegacySideFiles copies them to their places on the driver, then
// removes the old folders; a registry made by an older ferry keeps its
// digest aliases and referrers. Interrupted, it starts again from the old
// files, which are removed last.
func migrateLegacySideFiles(ctx context.Context, root string, d storagedriver.StorageDriver) error {
	aliases := &aliasIndex{d: d}
	referrers := &referrerIndex{d: d}
	for _, kind := range []string{"digests", "referrers"} {
		dir := filepath.Join(root, "ferry", kind)
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			parts := strings.Split(filepath.ToSlash(rel), "/")
			repo, uerr := url.PathUnescape(parts[0])
			if uerr != nil {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			switch {
			case kind == "digests" && len(parts) == 3:
				canonical, err := digest.Parse(strings.TrimSpace(string(b)))
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				return aliases.add(ctx, repo, digest.NewDigestFromEncoded(digest.Algorithm(parts[1]), parts[2]), canonical)
			case kind == "referrers" && len(parts) == 4 && strings.HasSuffix(p, ".json"):
				var desc ocispec.Descriptor
				if err := json.Unmarshal(b, &desc); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				return referrers.add(ctx, repo, digest.NewDigestFromEncoded(digest.Algorithm(parts[1]), parts[2]), desc)
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("registry: move %s onto the storage: %w", dir, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("registry: move %s onto the storage: %w", dir, err)
		}
	}
	return nil
}
