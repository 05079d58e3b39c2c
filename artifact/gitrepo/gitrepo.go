// Package gitrepo carries git repositories in packages: it resolves a ref to a commit once, and builds the repository's
// tree at that commit as an OCI artifact in the format Flux's
// OCIRepository reads — a manifest whose config has Flux's config media
// type, whose first layer is the tree as a gzip tar of Flux's content
// media type, and whose annotations name the source URL and the revision
// (`main@sha1:<hex>`) — byte for byte the same for the same commit.
//
// It reads repositories with go-git: a local path is opened as it is; a
// URL is cloned into memory over HTTP(S) or SSH (never through the git
// binary). Credentials never travel in a URL: one with a password is
// refused.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	git6 "github.com/go-git/go-git/v6"
	plumbing6 "github.com/go-git/go-git/v6/plumbing"
	client6 "github.com/go-git/go-git/v6/plumbing/client"
	http6 "github.com/go-git/go-git/v6/plumbing/transport/http"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/redact"
	"github.com/ferrypkg/ferry/internal/unreachable"
)

// Flux's media types (fluxcd/pkg oci): OCIRepository extracts the first
// layer; the config is not read.
const (
	ConfigMediaType  = "application/vnd.cncf.flux.config.v1+json"
	ContentMediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
	// BundleMediaType is the second layer, when the history travels: a
	// git bundle (v2) of every commit up to the carried one, whose refs
	// are the carried ref (or none, for a bare commit) and HEAD.
	BundleMediaType = "application/vnd.ferry.git.bundle.v2"
)

// Source names a repository and the ref to carry.
type Source struct {
	// URL is the repository's identity (what GitRepository and Argo CD
	// Application objects name): https://, http://, ssh:// or scp-like
	// git@host:path. It is cloned unless Path is set.
	URL string
	// Path is a local clone to read instead of cloning URL: a
	// slash-separated path inside Root, opened with OpenLocal; if Root is
	// nil, a folder that is itself the root (nothing outside it is read).
	Path string
	// Root is the folder Path is read in (the definition's folder).
	Root *os.Root
	// Ref is a branch, a tag, a full ref (refs/…) or a full 40-hex commit;
	// the remote's HEAD when empty.
	Ref string
	// CloneDir, if set, is where a URL is cloned (a bare repository in a
	// new folder below it, which the caller removes with CloneDir), so
	// that a large repository costs disk, not memory; in memory if empty.
	CloneDir string
}

// Resolved is a Source pinned: what the package records.
type Resolved struct {
	// URL is Source.URL without user information.
	URL string `json:"url"`
	// Ref is the full ref resolved (refs/heads/main, refs/tags/v1); empty
	// when the source named a commit.
	Ref string `json:"ref,omitempty"`
	// Commit is the commit's 40-hex id.
	Commit string `json:"commit"`
	// Revision is Flux's: <branch or tag>@sha1:<commit>, or sha1:<commit>.
	Revision string `json:"revision"`
	// Created is the commit's committer time, UTC.
	Created time.Time `json:"created"`
}

// Errors, wrapped with what they concern.
var (
	ErrRef        = errors.New("git ref")
	ErrCredential = errors.New("credentials in a repository URL")
)

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// LargeObject is the size above which go-git streams an object from disk
// instead of reading it into memory (1 MiB): a repository holding a file of
// gigabytes costs create a few MiB.
const LargeObject = 1 << 20

// Credentials are a user name and password (or token) for a clone over
// HTTP(S).
type Credentials struct {
	Username, Password string
}

// Open opens src's repository: its Path, inside src.Root (see OpenLocal),
// or its URL cloned (all refs, no work tree) into a new bare repository in
// src.CloneDir, which the caller removes; cred, if not nil, is sent to an
// HTTP(S) server, and over SSH the SSH agent and known_hosts are used, as
// git does.
//
// The clone is made with go-git v6, whose pack parser streams large
// objects to disk (a 256 MiB file costs 38 MiB; v5's holds each object
// whole: 295 MiB), then read like a local repository, with v5. Over
// HTTP(S), the server's list of refs is held to artifact.MaxGitRefList
// bytes (ErrRefList), and a server that answers nothing, or sends slower
// than 16 KiB/s, for a minute is given up (artifact.ErrStalled).
func Open(ctx context.Context, src Source, cred *Credentials) (*git.Repository, error) {
	if _, err := CleanURL(src.URL); err != nil {
		return nil, err
	}
	if src.Path != "" {
		if src.Root == nil {
			// The folder itself is the root. It stays open while the
			// repository is read (closed when collected).
			root, err := os.OpenRoot(src.Path)
			if err != nil {
				return nil, fmt.Errorf("open git repository %s: %w", src.Path, err)
			}
			return OpenLocal(root, ".")
		}
		return OpenLocal(src.Root, src.Path)
	}
	if src.CloneDir == "" {
		return nil, fmt.Errorf("clone %s: no folder to clone into", redact.URL(src.URL))
	}
	dir, err := os.MkdirTemp(src.CloneDir, "clone-")
	if err != nil {
		return nil, err
	}
	opts := &git6.CloneOptions{URL: src.URL, Bare: true, Tags: plumbing6.AllTags,
		ClientOptions: []client6.Option{client6.WithHTTPClient(httpClient())}}
	if cred != nil {
		opts.ClientOptions = append(opts.ClientOptions, client6.WithHTTPAuth(&http6.BasicAuth{Username: cred.Username, Password: cred.Password}))
	}
	if _, err := git6.PlainCloneContext(ctx, dir, opts); err != nil {
		if errors.Is(err, ErrRefList) || errors.Is(err, artifact.ErrStalled) {
			err = refusal(err) // go-git's words around it add nothing
		} else {
			err = unreachable.Said(err) // nor around a server that does not answer
		}
		return nil, fmt.Errorf("clone %s: %w", redact.URL(src.URL), redact.Error(err))
	}
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(), filesystem.Options{LargeObjectThreshold: LargeObject})
	r, err := git.Open(st, nil)
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", redact.URL(src.URL), err)
	}
	return r, nil
}

// OpenLocal opens the repository at dir (slash-separated, relative to
// root): a work tree whose .git is a folder, or a file naming its git
// folder (`gitdir: …`, as `git worktree` and submodules write), or a bare
// repository. Every file go-git reads is read inside root: a gitdir, a
// commondir, alternates or a symbolic link that leads out of it is refused
// (confine.ErrEscapes), and a FIFO or a device is never read. Objects
// larger than LargeObject are streamed from disk.
func OpenLocal(root *os.Root, dir string) (*git.Repository, error) {
	fail := func(err error) (*git.Repository, error) {
		return nil, fmt.Errorf("open git repository %s: %w", dir, err)
	}
	top := rootFS{root: root}
	work, err := top.Chroot(dir)
	if err != nil {
		return fail(err)
	}
	var dot billy.Filesystem
	fi, err := work.Stat(".git")
	switch {
	case err == nil && fi.IsDir():
		dot, err = work.Chroot(".git")
	case err == nil && fi.Mode().IsRegular():
		var target string
		if target, err = readGitFile(root, path.Join(dir, ".git"), "gitdir: "); err == nil {
			dot, err = chrootGitPath(root, dir, target)
		}
	case errors.Is(err, fs.ErrNotExist):
		if _, err := work.Stat("HEAD"); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a git repository (it holds neither .git nor HEAD)", dir)
		}
		dot, err = work, nil // bare
	}
	if err != nil {
		return fail(err)
	}
	repoFS := dot
	if _, err := dot.Stat("commondir"); err == nil {
		dotDir := strings.TrimPrefix(dot.Root(), "/")
		target, err := readGitFile(root, path.Join(dotDir, "commondir"), "")
		if err != nil {
			return fail(err)
		}
		common, err := chrootGitPath(root, dotDir, target)
		if err != nil {
			return fail(fmt.Errorf("commondir: %w", err))
		}
		repoFS = dotgit.NewRepositoryFilesystem(dot, common)
	}
	st := filesystem.NewStorageWithOptions(repoFS, cache.NewObjectLRUDefault(), filesystem.Options{
		LargeObjectThreshold: LargeObject,
		AlternatesFS:         top,
	})
	r, err := git.Open(st, nil)
	if err != nil {
		return fail(err)
	}
	return r, nil
}

// readGitFile reads a one-line file git writes to name another folder
// (.git's "gitdir: <path>", commondir's "<path>"), at most 4 KiB.
func readGitFile(root *os.Root, name, prefix string) (string, error) {
	b, err := confine.ReadFile(root, name, 4<<10)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	target, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if !ok || target == "" {
		return "", fmt.Errorf("%s: want %q and a path", name, prefix+"<path>")
	}
	return target, nil
}

// chrootGitPath is the folder a gitdir or commondir names — relative to
// base, or absolute — as a view inside root; a path that leads out of root
// is refused.
func chrootGitPath(root *os.Root, base, target string) (billy.Filesystem, error) {
	var rel string
	if filepath.IsAbs(target) {
		top, err := filepath.Abs(root.Name())
		if err == nil {
			top, err = filepath.EvalSymlinks(top)
		}
		if err != nil {
			return nil, err
		}
		real, err := filepath.EvalSymlinks(target)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", target, err)
		}
		if rel, err = filepath.Rel(top, real); err != nil || !filepath.IsLocal(rel) && rel != "." {
			return nil, fmt.Errorf("%s %w", target, confine.ErrEscapes)
		}
		rel = filepath.ToSlash(rel)
	} else {
		rel = path.Join(base, filepath.ToSlash(target))
		if !filepath.IsLocal(rel) && rel != "." {
			return nil, fmt.Errorf("%s %w", target, confine.ErrEscapes)
		}
	}
	return rootFS{root: root}.Chroot(rel)
}

// Resolve pins src.Ref in r to a commit.
func Resolve(r *git.Repository, src Source) (Resolved, error) {
	u, err := CleanURL(src.URL)
	if err != nil {
		return Resolved{}, err
	}
	res := Resolved{URL: u}
	var hash plumbing.Hash
	switch ref := src.Ref; {
	case fullCommit.MatchString(ref):
		hash = plumbing.NewHash(ref)
	case len(ref) >= 4 && len(ref) < 40 && regexp.MustCompile(`^[0-9a-f]+$`).MatchString(ref) && !refExists(r, ref):
		return res, fmt.Errorf("%w %q: an abbreviated commit is ambiguous; give all 40 hex digits", ErrRef, ref)
	default:
		name, h, err := resolveRef(r, ref)
		if err != nil {
			return res, err
		}
		res.Ref, hash = name.String(), h
	}
	c, err := r.CommitObject(hash)
	if err != nil {
		return res, fmt.Errorf("%w %q: commit %s: %w", ErrRef, src.Ref, hash, err)
	}
	res.Commit, res.Created = c.Hash.String(), c.Committer.When.UTC()
	res.Revision = "sha1:" + res.Commit
	if res.Ref != "" {
		short := strings.TrimPrefix(strings.TrimPrefix(res.Ref, "refs/heads/"), "refs/tags/")
		res.Revision = short + "@" + res.Revision
	}
	return res, nil
}

func refExists(r *git.Repository, name string) bool {
	_, _, err := resolveRef(r, name)
	return err == nil
}

// resolveRef finds a branch, tag or full ref (HEAD if empty) and peels it
// to a commit.
func resolveRef(r *git.Repository, name string) (plumbing.ReferenceName, plumbing.Hash, error) {
	var candidates []plumbing.ReferenceName
	switch {
	case name == "" || name == "HEAD":
		head, err := r.Reference(plumbing.HEAD, false)
		if err != nil {
			return "", plumbing.ZeroHash, fmt.Errorf("%w HEAD: %w", ErrRef, err)
		}
		if head.Type() != plumbing.SymbolicReference {
			return "", head.Hash(), nil
		}
		candidates = []plumbing.ReferenceName{head.Target()}
	case strings.HasPrefix(name, "refs/"):
		candidates = []plumbing.ReferenceName{plumbing.ReferenceName(name)}
	default:
		candidates = []plumbing.ReferenceName{
			plumbing.NewBranchReferenceName(name), plumbing.NewTagReferenceName(name),
			plumbing.NewRemoteReferenceName("origin", name),
		}
	}
	for _, c := range candidates {
		ref, err := r.Reference(c, true)
		if err != nil {
			continue
		}
		h := ref.Hash()
		if tag, err := r.TagObject(h); err == nil { // annotated: peel
			commit, err := tag.Commit()
			if err != nil {
				return "", plumbing.ZeroHash, fmt.Errorf("%w %q: tag %s names no commit: %w", ErrRef, name, c, err)
			}
			h = commit.Hash
		}
		if strings.HasPrefix(c.String(), "refs/remotes/origin/") {
			c = plumbing.NewBranchReferenceName(strings.TrimPrefix(c.String(), "refs/remotes/origin/"))
		}
		return c, h, nil
	}
	return "", plumbing.ZeroHash, fmt.Errorf("%w %q: no such branch, tag or ref", ErrRef, name)
}
