package gitserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v6/osfs"
	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/cache"
	"github.com/go-git/go-git/v6/plumbing/object"
	"github.com/go-git/go-git/v6/storage"
	"github.com/go-git/go-git/v6/storage/filesystem"
	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/internal/scratch"
)

// indexTimeout bounds indexing one bundle. It runs detached from the
// request that started it, so that one client going away does not fail
// the others waiting for the same repository.
const indexTimeout = 30 * time.Minute

// objectCacheBytes bounds the objects go-git keeps decoded per
// repository (its default is 96 MiB).
const objectCacheBytes = 16 * cache.MiByte

// index holds the bare repositories made from bundles, one per commit,
// ref and bundle digest, under dir: the cache directory, or a temporary
// one of its own (removed by close, and by the next ferry process to make
// a temporary folder if this one was killed).
type index struct {
	dir   string
	temp  *scratch.Dir // dir, when it is ours
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	repos map[string]*indexed
}

type indexed struct {
	done chan struct{}
	st   *servedRepo
	err  error
}

// servedRepo is an indexed repository, open.
type servedRepo struct {
	fs *filesystem.Storage
	served
}

func newIndex(dir string) (*index, error) {
	ix := &index{repos: map[string]*indexed{}}
	if dir == "" {
		d, err := scratch.MkdirTemp("", "ferry-gitserver-")
		if err != nil {
			return nil, fmt.Errorf("gitserver: temporary index directory: %w", err)
		}
		ix.dir, ix.temp = d.Path, d
	} else {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("gitserver: cache directory: %w", err)
		}
		sweepCacheDir(dir)
		ix.dir = dir
	}
	ix.ctx, ix.stop = context.WithCancel(context.Background())
	return ix, nil
}

// sweepCacheDir removes what killed runs left in dir: the temporary
// folders of indexes being built (scratch's, which no live process holds)
// and those of ferry versions before scratch (".index-" and digits: no
// process makes them any more).
func sweepCacheDir(dir string) {
	scratch.Sweep(dir)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), ".index-"); ok && e.IsDir() && rest != "" && strings.Trim(rest, "0123456789") == "" {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// close stops the indexing in progress, closes the repositories and
// removes the directory if it is the index's own.
func (ix *index) close() error {
	ix.stop()
	ix.wg.Wait()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var errs []error
	for key, e := range ix.repos {
		if e.st != nil {
			errs = append(errs, e.st.fs.Close())
		}
		delete(ix.repos, key)
	}
	if ix.temp != nil {
		errs = append(errs, ix.temp.Remove())
		ix.temp = nil
	}
	return errors.Join(errs...)
}

var hexCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// get returns repo's bare repository, indexing its bundle on first use;
// concurrent callers wait for the one indexing. A bundle refused as
// ErrBundle stays refused (it is immutable by digest); other failures are
// retried by the next call.
func (ix *index) get(ctx context.Context, repo *Repo) (*servedRepo, error) {
	if err := checkRepo(repo); err != nil {
		return nil, err
	}
	key := digest.FromString(repo.Commit + "\n" + repo.Ref + "\n" + repo.BundleDigest.String()).Encoded()
	ix.mu.Lock()
	if ix.ctx.Err() != nil {
		ix.mu.Unlock()
		return nil, errClosed
	}
	e, ok := ix.repos[key]
	if !ok {
		e = &indexed{done: make(chan struct{})}
		ix.repos[key] = e
		ix.wg.Add(1)
		go func() {
			defer ix.wg.Done()
			ictx, cancel := context.WithTimeout(ix.ctx, indexTimeout)
			defer cancel()
			st, err := ix.build(ictx, repo, key)
			ix.mu.Lock()
			e.st, e.err = st, err
			if err != nil && !errors.Is(err, ErrBundle) {
				delete(ix.repos, key)
			}
			ix.mu.Unlock()
			close(e.done)
		}()
	}
	ix.mu.Unlock()
	select {
	case <-e.done:
		return e.st, e.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// errClosed: the server was closed.
var errClosed = errors.New("gitserver: closed")

func checkRepo(repo *Repo) error {
	switch {
	case !hexCommit.MatchString(repo.Commit):
		return fmt.Errorf("%s: commit %.64q: want 40 lower-case hex digits", repo.Key, repo.Commit)
	case repo.Ref != "" && (!strings.HasPrefix(repo.Ref, "refs/") || plumbing.ReferenceName(repo.Ref).Validate() != nil):
		return fmt.Errorf("%s: ref %.64q: want a full ref (refs/heads/…, refs/tags/…)", repo.Key, repo.Ref)
	case repo.Bundle == nil:
		return fmt.Errorf("%s: no bundle", repo.Key)
	}
	if err := repo.BundleDigest.Validate(); err != nil {
		return fmt.Errorf("%s: bundle digest %.80q: %w", repo.Key, repo.BundleDigest, err)
	}
	return nil
}

// build indexes repo's bundle into a temporary directory renamed to
// dir/key once complete (a directory already there, from an earlier run
// or another process, is used as it is once its object table and refs
// check out).
func (ix *index) build(ctx context.Context, repo *Repo, key string) (*servedRepo, error) {
	final := filepath.Join(ix.dir, key)
	if st, err := openIndexed(final, repo); err == nil {
		return st, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		if err := os.RemoveAll(final); err != nil {
			return nil, fmt.Errorf("%s: stale index: %w", repo.Key, err)
		}
	}
	tmp, err := scratch.MkdirTemp(ix.dir, ".index-")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", repo.Key, err)
	}
	defer tmp.Remove() // a no-op once renamed: it releases the lock
	if err := indexBundle(ctx, tmp.Path, repo); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Path, final); err != nil {
		// Another process may have made it meanwhile.
		if st, oerr := openIndexed(final, repo); oerr == nil {
			return st, nil
		}
		return nil, fmt.Errorf("%s: %w", repo.Key, err)
	}
	return openIndexed(final, repo)
}

// openIndexed opens the index in dir, checked against repo; an error
// wrapping fs.ErrNotExist if there is none.
func openIndexed(dir string, repo *Repo) (*servedRepo, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	objs, err := loadObjectTable(filepath.Join(dir, objectTableName))
	if err != nil {
		// An index made by an earlier version, or broken: made again.
		return nil, fmt.Errorf("%s: %w", repo.Key, errStaleIndex)
	}
	st := openDir(dir)
	if err := checkRefs(st, repo); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("%s: %w: %w", repo.Key, errStaleIndex, err)
	}
	return &servedRepo{fs: st, served: served{Storer: st, objs: objs}}, nil
}

var errStaleIndex = errors.New("stale index")

func openDir(dir string) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(objectCacheBytes), filesystem.Options{
		ExclusiveAccess:      true,
		LargeObjectThreshold: maxResolved,
	})
}

// bundleRef is one "<hex> <refname>" line of a bundle's header.
type bundleRef struct {
	hash plumbing.Hash
	name string
}

// indexBundle writes repo's bundle into dir as a bare repository: its
// header is checked, its pack copied to disk while the whole is checked
// against repo.BundleDigest, then indexed (indexPack); the repository gets
// the carried ref and HEAD (a symbolic ref to it, or the commit itself),
// and nothing else.
func indexBundle(ctx context.Context, dir string, repo *Repo) error {
	rc, err := repo.Bundle(ctx)
	if err != nil {
		return fmt.Errorf("%s: open bundle: %w", repo.Key, err)
	}
	defer rc.Close()
	verifier := repo.BundleDigest.Verifier()
	br := bufio.NewReaderSize(io.TeeReader(ctxReader{ctx, rc}, verifier), 64<<10)
	refs, err := readBundleHeader(br)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", repo.Key, ErrBundle, err)
	}
	tip, err := carriedTip(refs, repo)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", repo.Key, ErrBundle, err)
	}
	packDir := filepath.Join(dir, "objects", "pack")
	if err := os.MkdirAll(packDir, 0o700); err != nil {
		return fmt.Errorf("%s: %w", repo.Key, err)
	}
	f, err := os.OpenFile(filepath.Join(packDir, "tmp.pack"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", repo.Key, err)
	}
	defer f.Close()
	if _, err := io.Copy(f, br); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: read bundle: %w", repo.Key, context.Cause(ctx))
		}
		return fmt.Errorf("%s: read bundle: %w", repo.Key, err)
	}
	if !verifier.Verified() {
		return fmt.Errorf("%s: %w: content does not match its digest %s", repo.Key, ErrBundle, repo.BundleDigest)
	}
	if _, err := indexPack(ctx, f, dir); err != nil {
		if errors.Is(err, errPack) {
			return fmt.Errorf("%s: %w: %w", repo.Key, ErrBundle, err)
		}
		return fmt.Errorf("%s: index: %w", repo.Key, err)
	}
	st := openDir(dir)
	defer st.Close()
	head := plumbing.NewHashReference(plumbing.HEAD, plumbing.NewHash(repo.Commit))
	if repo.Ref != "" {
		if err := st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(repo.Ref), tip)); err != nil {
			return fmt.Errorf("%s: %w", repo.Key, err)
		}
		if plumbing.ReferenceName(repo.Ref).IsBranch() {
			head = plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.ReferenceName(repo.Ref))
		}
	}
	if err := st.SetReference(head); err != nil {
		return fmt.Errorf("%s: %w", repo.Key, err)
	}
	return checkRefs(st, repo)
}

// readBundleHeader reads a v2 (or v3, SHA-1) bundle's header up to the
// blank line before the pack, and returns its refs. A bundle with
// prerequisites is refused: the server needs the whole history.
func readBundleHeader(br *bufio.Reader) ([]bundleRef, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	switch line {
	case "# v2 git bundle\n", "# v3 git bundle\n":
	default:
		return nil, fmt.Errorf("not a v2 or v3 git bundle (starts %.64q)", strings.TrimSpace(line))
	}
	var refs []bundleRef
	for n := 0; ; n++ {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("header: %w", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if len(refs) == 0 {
				return nil, errors.New("header names no ref")
			}
			return refs, nil
		case n > 10000:
			return nil, errors.New("header: more than 10000 lines")
		case strings.HasPrefix(line, "@"):
			if line != "@object-format=sha1" {
				return nil, fmt.Errorf("capability %.64q not supported", line)
			}
		case strings.HasPrefix(line, "-"):
			return nil, errors.New("prerequisite commits: the bundle does not hold the whole history")
		default:
			h, name, ok := strings.Cut(line, " ")
			if !ok || !hexCommit.MatchString(h) || name == "" {
				return nil, fmt.Errorf("header line %.80q: want <hex> <ref>", line)
			}
			refs = append(refs, bundleRef{plumbing.NewHash(h), name})
		}
	}
}

// carriedTip is the object the bundle's line for repo.Ref names (a commit,
// or an annotated tag); for a bare commit, its HEAD line must name the
// commit. A HEAD line, when present, must name the commit too.
func carriedTip(refs []bundleRef, repo *Repo) (plumbing.Hash, error) {
	commit := plumbing.NewHash(repo.Commit)
	var tip plumbing.Hash
	var found bool
	for _, r := range refs {
		switch r.name {
		case "HEAD":
			if r.hash != commit {
				return tip, fmt.Errorf("HEAD is %s, not the recorded commit %s", r.hash, repo.Commit)
			}
			if repo.Ref == "" {
				tip, found = commit, true
			}
		case repo.Ref:
			if repo.Ref != "" {
				tip, found = r.hash, true
			}
		}
	}
	if !found {
		want := repo.Ref
		if want == "" {
			want = "HEAD"
		}
		return tip, fmt.Errorf("no %s line naming %s", want, repo.Commit)
	}
	return tip, nil
}

// checkRefs checks that st holds the carried ref and HEAD only, and that
// both lead to the recorded commit, present with its tree.
func checkRefs(st storage.Storer, repo *Repo) error {
	commit := plumbing.NewHash(repo.Commit)
	head, err := st.Reference(plumbing.HEAD)
	if err != nil {
		return fmt.Errorf("%s: HEAD: %w", repo.Key, err)
	}
	branch := plumbing.ReferenceName(repo.Ref).IsBranch()
	switch {
	case branch && (head.Type() != plumbing.SymbolicReference || head.Target() != plumbing.ReferenceName(repo.Ref)):
		return fmt.Errorf("%s: HEAD is %.80s, not a symbolic ref to %.80s", repo.Key, head, repo.Ref)
	case !branch && head.Hash() != commit:
		return fmt.Errorf("%s: HEAD is %s, not the commit %s", repo.Key, head, repo.Commit)
	}
	if repo.Ref != "" {
		ref, err := st.Reference(plumbing.ReferenceName(repo.Ref))
		if err != nil {
			return fmt.Errorf("%s: %s: %w", repo.Key, repo.Ref, err)
		}
		peeled, err := peel(st, ref.Hash())
		if err != nil {
			return fmt.Errorf("%s: %w: %s: %w", repo.Key, ErrBundle, ref.Hash(), err)
		}
		if peeled != commit {
			return fmt.Errorf("%s: %w: %s names %s, not the recorded commit %s", repo.Key, ErrBundle, repo.Ref, peeled, repo.Commit)
		}
	}
	c, err := object.GetCommit(st, commit)
	if err != nil {
		return fmt.Errorf("%s: %w: commit %s: %w", repo.Key, ErrBundle, repo.Commit, err)
	}
	if _, err := c.Tree(); err != nil {
		return fmt.Errorf("%s: %w: tree of %s: %w", repo.Key, ErrBundle, repo.Commit, err)
	}
	iter, err := st.IterReferences()
	if err != nil {
		return err
	}
	defer iter.Close()
	return iter.ForEach(func(r *plumbing.Reference) error {
		if n := r.Name(); n != plumbing.HEAD && n.String() != repo.Ref {
			return fmt.Errorf("%s: unexpected ref %.80s", repo.Key, n)
		}
		return nil
	})
}

// peel follows annotated tags from h to the commit they name.
func peel(st storage.Storer, h plumbing.Hash) (plumbing.Hash, error) {
	for range 10 {
		tag, err := object.GetTag(st, h)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return h, nil // not a tag (or missing: GetCommit says so)
		}
		if err != nil {
			return h, err
		}
		h = tag.Target
	}
	return h, errors.New("tags nested more than 10 deep")
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
