package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distribution/distribution/v3/registry/auth"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"golang.org/x/sync/errgroup"
)

// GET /v2/_catalog (Docker Registry HTTP API V2, "Listing Repositories"; not
// in the OCI spec, but crane catalog, oras repo ls and regctl repo ls use it)
// is ferry's own. distribution v3.1.2 walks its repository tree for every
// page, in an order that is not lexical once repositories nest ("a/0" came
// before "a"), and with last= its walk went on after the page was full: a
// repository with nested repositories whose names sort before "_manifests"
// (a digit first, "a/0") made it index past its page (a panic, a dropped
// connection). A walk per page also costs the whole tree on S3.
//
// catalogIndex is a flat index on the registry's storage driver instead: one
// small object per repository, <catalogDir>/<key>, where key is the name
// encoded into one path component whose byte order is the names' lexical
// order (catalogKey). Every registry on the storage sees it; a page is one
// listing that starts after the last name and stops when the page is full
// (one ListObjectsV2 on S3, a directory read on the filesystem), so paging
// through 10,000 repositories costs 10,000/n small listings, never a walk of
// the repositories. A manifest PUT that succeeds records its repository
// before the client is answered; a storage made by an older ferry is indexed
// once, by New (catalogStamp tells it is done).

// catalogMaxEntries is the most repositories one GET /v2/_catalog answers,
// and the page size when the request names none (distribution's default for
// catalog.maxentries). A client asking for more gets this many and a Link
// header to the rest: distribution answered n above it with 400
// PAGINATION_NUMBER_INVALID, where its tags list returns fewer results with
// a Link header, and clients that ask for a large page (crane asks for
// 10000) failed.
const catalogMaxEntries = 1000

const (
	// catalogDir holds the index, one object per repository.
	catalogDir = "/ferry/catalog/repositories"
	// catalogStamp says the index holds every repository in storage.
	catalogStamp = "/ferry/catalog/indexed"
)

// catalogKey encodes a repository name into one path component that the
// storage drivers accept ([A-Za-z0-9._-]) and whose byte order is the
// names' byte (lexical) order: "/" becomes "0", each digit the next
// character ("0" → "1", …, "8" → "9", "9" → "A"), and the other characters
// of a name ("-", ".", "_", a-z) stay. The map is strictly increasing on
// those characters ("-" < "." < "/"→"0" < "0"→"1" … "9"→"A" < "_" < "a"),
// so comparing keys compares names, and a key is as long as its name (at
// most 255 bytes, a file name's limit).
func catalogKey(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c == '/':
			b[i] = '0'
		case c == '9':
			b[i] = 'A'
		case c >= '0' && c <= '8':
			b[i] = c + 1
		}
	}
	return string(b)
}

// catalogName decodes a catalogKey.
func catalogName(key string) string {
	b := []byte(key)
	for i, c := range b {
		switch {
		case c == '0':
			b[i] = '/'
		case c == 'A':
			b[i] = '9'
		case c >= '1' && c <= '9':
			b[i] = c - 1
		}
	}
	return string(b)
}

// inCatalogAlphabet reports whether c may be in a repository name.
func inCatalogAlphabet(c byte) bool {
	return c == '-' || c == '.' || c == '/' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
}

// catalogIndex is the index of a storage's repositories.
type catalogIndex struct {
	d storagedriver.StorageDriver

	mu    sync.Mutex
	known map[string]struct{} // recorded by this process; bounded
	// On the filesystem, the sorted keys as of the index folder's
	// modification time (see listing).
	keys    []string
	keysMod time.Time
	keysAt  time.Time
}

// maxKnownRepositories bounds the names a catalogIndex remembers having
// recorded (past it, it forgets them all and records again: one small
// write per repository).
const maxKnownRepositories = 100_000

// rebuildWrites is how many records an indexing writes at once.
const rebuildWrites = 16

func newCatalogIndex(d storagedriver.StorageDriver) *catalogIndex {
	return &catalogIndex{d: d, known: map[string]struct{}{}}
}

// add records repository name.
func (c *catalogIndex) add(ctx context.Context, name string) error {
	c.mu.Lock()
	_, ok := c.known[name]
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := c.d.PutContent(ctx, catalogDir+"/"+catalogKey(name), []byte(name+"\n")); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	c.mu.Lock()
	if len(c.known) >= maxKnownRepositories {
		clear(c.known)
	}
	c.known[name] = struct{}{}
	c.mu.Unlock()
	return nil
}

// page returns up to n repository names after last, in lexical order, and
// whether more follow.
func (c *catalogIndex) page(ctx context.Context, last string, n int) ([]string, bool, error) {
	names := make([]string, 0, min(n, 64))
	if n <= 0 {
		return names, false, nil
	}
	var opts []func(*storagedriver.WalkOptions)
	// Start after the longest prefix of last made of a name's characters:
	// every name after last is after that prefix, and the keys of names
	// up to it sort before its key followed by "!" (lower than any
	// character of a key), which no object is named (the filesystem
	// driver's walk lists its start-after path: a file there fails, a
	// missing path is skipped).
	p := 0
	for p < len(last) && p < maxNameLength && inCatalogAlphabet(last[p]) {
		p++
	}
	if c.d.Name() == "filesystem" {
		return c.pageSorted(ctx, last, last[:p], n)
	}
	if p > 0 {
		opts = append(opts, storagedriver.WithStartAfterHint(catalogDir+"/"+catalogKey(last[:p])+"!"))
	}
	more := false
	err := c.d.Walk(ctx, catalogDir, func(fi storagedriver.FileInfo) error {
		if more { // the walk may call again after the page is full
			return storagedriver.ErrFilledBuffer
		}
		if fi.IsDir() {
			return storagedriver.ErrSkipDir
		}
		if path.Dir(fi.Path()) != catalogDir {
			return nil
		}
		name := catalogName(path.Base(fi.Path()))
		if name <= last || !validName(name) {
			return nil
		}
		if len(names) == n {
			more = true
			return storagedriver.ErrFilledBuffer
		}
		names = append(names, name)
		return nil
	}, opts...)
	if err != nil && !notFound(err) {
		return nil, false, fmt.Errorf("catalog: %w", err)
	}
	return names, more, nil
}

// pageSorted is page on the filesystem: one directory read gives every
// key, sorted once and kept while the folder is unchanged, and a page is a
// binary search into them.
func (c *catalogIndex) pageSorted(ctx context.Context, last, prefix string, n int) ([]string, bool, error) {
	keys, err := c.listing(ctx)
	if err != nil {
		return nil, false, err
	}
	names := make([]string, 0, min(n, 64))
	i, found := slices.BinarySearch(keys, catalogKey(prefix))
	if found {
		i++
	}
	for ; i < len(keys); i++ {
		name := catalogName(keys[i])
		if name <= last || !validName(name) {
			continue
		}
		if len(names) == n {
			return names, true, nil
		}
		names = append(names, name)
	}
	return names, false, nil
}

// listing returns the sorted keys of the index. They are read again when
// the folder's modification time changed, and also when it was within a
// second of the last reading: an entry added in the same tick of the file
// system's clock would not change it again.
func (c *catalogIndex) listing(ctx context.Context) ([]string, error) {
	now := time.Now()
	fi, err := c.d.Stat(ctx, catalogDir)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	c.mu.Lock()
	if c.keys != nil && fi.ModTime().Equal(c.keysMod) && c.keysMod.Before(c.keysAt.Add(-time.Second)) {
		keys := c.keys
		c.mu.Unlock()
		return keys, nil
	}
	c.mu.Unlock()
	paths, err := c.d.List(ctx, catalogDir)
	if err != nil && !notFound(err) {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	keys := make([]string, 0, len(paths))
	for _, p := range paths {
		keys = append(keys, path.Base(p))
	}
	slices.Sort(keys)
	c.mu.Lock()
	c.keys, c.keysMod, c.keysAt = keys, fi.ModTime(), now
	c.mu.Unlock()
	return keys, nil
}

// indexed reports whether the index holds every repository in storage.
func (c *catalogIndex) indexed(ctx context.Context) (bool, error) {
	_, err := c.d.Stat(ctx, catalogStamp)
	switch {
	case err == nil:
		return true, nil
	case notFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("catalog: %w", err)
	}
}

// rebuild indexes every repository in storage (one that has manifests,
// as distribution lists them) and stamps the index complete. Repositories
// added meanwhile by a registry on the same storage record themselves.
func (c *catalogIndex) rebuild(ctx context.Context) error {
	var names []string
	root := repositoriesDir + "/"
	err := c.d.Walk(ctx, repositoriesDir, func(fi storagedriver.FileInfo) error {
		rel, ok := strings.CutPrefix(fi.Path(), root)
		if !ok || rel == "" {
			return nil
		}
		base := path.Base(rel)
		switch {
		case !fi.IsDir():
			return nil
		case base == "_manifests":
			if name := path.Dir(rel); validName(name) {
				names = append(names, name)
			}
			return storagedriver.ErrSkipDir
		case strings.HasPrefix(base, "_"):
			return storagedriver.ErrSkipDir
		}
		return nil
	})
	if err != nil && !notFound(err) {
		return fmt.Errorf("catalog: index the repositories: %w", err)
	}
	// Each record is a small write (on the filesystem, with an fsync):
	// several at once.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rebuildWrites)
	for _, name := range names {
		g.Go(func() error { return c.add(gctx, name) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := c.d.PutContent(ctx, catalogStamp, []byte(strconv.Itoa(len(names))+" repositories indexed\n")); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	return nil
}

// serveCatalog answers GET and HEAD /v2/_catalog[?n=<n>&last=<name>]: the
// repositories after last in lexical order, at most n (catalogMaxEntries
// when n is absent or larger), with a Link header to the next page when
// more follow. A malformed n is 400 PAGINATION_NUMBER_INVALID.
func (h *referrersHandler) serveCatalog(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if !h.authorized(w, r, auth.Access{Resource: auth.Resource{Type: "registry", Name: "catalog"}, Action: "*"}) {
		return
	}
	q := r.URL.Query()
	n := catalogMaxEntries
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			writeError(w, http.StatusBadRequest, "PAGINATION_NUMBER_INVALID", fmt.Sprintf("invalid number of results requested: n=%.50q", s))
			return
		}
		n = min(v, catalogMaxEntries)
	}
	last := q.Get("last")
	names, more, err := h.catalog.page(r.Context(), last, n)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return
		}
		writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	body, err := json.Marshal(struct {
		Repositories []string `json:"repositories"`
	}{names})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	if more {
		next := url.Values{"n": {strconv.Itoa(n)}, "last": {names[len(names)-1]}}
		w.Header().Set("Link", fmt.Sprintf(`</v2/_catalog?%s>; rel="next"`, next.Encode()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}
