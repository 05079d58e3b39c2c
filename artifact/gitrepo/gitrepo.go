// Package gitrepo carries git repositories in packages (issue 21, first
// step): it resolves a ref to a commit once, and builds the repository's
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
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/revlist"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	git6 "github.com/go-git/go-git/v6"
	plumbing6 "github.com/go-git/go-git/v6/plumbing"
	client6 "github.com/go-git/go-git/v6/plumbing/client"
	http6 "github.com/go-git/go-git/v6/plumbing/transport/http"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/redact"
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
// whole: 295 MiB), then read like a local repository, with v5.
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
	opts := &git6.CloneOptions{URL: src.URL, Bare: true, Tags: plumbing6.AllTags}
	if cred != nil {
		opts.ClientOptions = []client6.Option{client6.WithHTTPAuth(&http6.BasicAuth{Username: cred.Username, Password: cred.Password})}
	}
	if _, err := git6.PlainCloneContext(ctx, dir, opts); err != nil {
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

// CleanURL is u without user information; a URL that carries a password
// is refused (credentials belong to the git credential helpers or a netrc,
// never to a package), and so is one with a query or a fragment, which name
// no repository (a token there would end up in the package).
func CleanURL(u string) (string, error) {
	if u == "" {
		return "", errors.New("git source: no url")
	}
	if strings.ContainsAny(u, "?#") {
		return "", fmt.Errorf("git source url %s: a query or fragment is not part of a repository's address; credentials go in a git credential helper or ~/.netrc", redact.URL(u))
	}
	if strings.ContainsFunc(u, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", fmt.Errorf("git source url %q: control characters", redact.URL(u))
	}
	if !strings.Contains(u, "://") {
		return u, nil // scp-like git@host:path, or a path
	}
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("git source url %s: %w", redact.Text(u), errors.Unwrap(err))
	}
	if p.User != nil {
		if _, ok := p.User.Password(); ok {
			return "", fmt.Errorf("%w: %s: use a git credential helper or ~/.netrc", ErrCredential, redact.URL(u))
		}
		p.User = nil
	}
	return p.String(), nil
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

// vcsFiles are left out of the tree, as `flux push artifact` leaves them
// out by default.
var vcsFiles = []string{".gitignore", ".gitmodules", ".gitattributes"}

// Build pushes to dst the Flux artifact of the tree at res.Commit: config,
// the tree's gzip tar, and the manifest. Entries are in lexical order,
// directories 0755, files 0644 (0755 executable), owned by 0:0, times
// zero; symbolic links and submodules are left out (Flux's untar skips
// them). The same commit gives the same digest.
//
// With history, a second layer holds the git bundle of the commit's
// history (Bundle), which the in-cluster git server serves.
func Build(ctx context.Context, r *git.Repository, res Resolved, history bool, dst content.Pusher) (ocispec.Descriptor, error) {
	c, err := r.CommitObject(plumbing.NewHash(res.Commit))
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("commit %s: %w", res.Commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: tree of %s: %w", ErrTree, res.Commit, err)
	}
	if err := CheckTree(r.Storer, tree); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s at %s: %w", res.URL, res.Commit, err)
	}
	created := res.Created.UTC().Format(time.RFC3339)
	cfg, _ := json.Marshal(map[string]string{"created": created})
	push := func(mediaType string, b []byte) (ocispec.Descriptor, error) {
		d := content.NewDescriptorFromBytes(mediaType, b)
		return d, dst.Push(ctx, d, bytes.NewReader(b))
	}
	cfgDesc, err := push(ConfigMediaType, cfg)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	layerDesc, err := pushSpooled(ctx, dst, ContentMediaType, func(w io.Writer) error { return writeTree(w, tree) })
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("archive %s at %s: %w", res.URL, res.Commit, err)
	}
	layers := []ocispec.Descriptor{layerDesc}
	if history {
		bundleDesc, err := pushSpooled(ctx, dst, BundleMediaType, func(w io.Writer) error { return Bundle(w, r, res) })
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		layers = append(layers, bundleDesc)
	}
	return oras.PackManifest(ctx, dst, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{
		ConfigDescriptor: &cfgDesc,
		Layers:           layers,
		ManifestAnnotations: map[string]string{
			ocispec.AnnotationSource:   res.URL,
			ocispec.AnnotationRevision: res.Revision,
			ocispec.AnnotationCreated:  created,
		},
	})
}

// writeTree writes tree as a deterministic gzip tar. The tree must have
// passed CheckTree.
func writeTree(w io.Writer, tree *object.Tree) error {
	gz, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	if err := walk(tw, tree, ""); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// treeStats is what CheckTree learns of one tree object, wherever it
// appears: the entries below it (files it carries and folders), the bytes
// of those files, and its longest path, relative to it.
type treeStats struct {
	entries, bytes int64
	deepest        int
}

// treeCheck is one run of CheckTree: each distinct tree and blob is read
// once, however many paths name it, so that a tree of a billion paths made
// of shared subtrees costs as little to refuse as it took to make.
type treeCheck struct {
	st       storer.EncodedObjectStorer
	trees    map[plumbing.Hash]treeStats
	blobs    map[plumbing.Hash]int64
	distinct int64
}

// CheckTree checks a commit's tree before anything of it is written: every
// entry name (CheckTreePath), and the budgets of artifact/limits.go — at
// most artifact.MaxGitEntries entries, paths of at most artifact.MaxGitPath
// bytes, and files adding up to at most twice the bytes of the distinct
// contents they hold plus artifact.GitExpansionFloor (one blob named by a
// million paths is a bomb, not a repository). Errors wrap ErrTree.
func CheckTree(st storer.EncodedObjectStorer, tree *object.Tree) error {
	c := &treeCheck{st: st, trees: map[plumbing.Hash]treeStats{}, blobs: map[plumbing.Hash]int64{}}
	stats, err := c.visit(tree, "")
	if err != nil {
		return err
	}
	switch {
	case stats.entries > artifact.MaxGitEntries:
		return fmt.Errorf("%w: %d entries, more than %d", ErrTree, stats.entries, artifact.MaxGitEntries)
	case stats.bytes > 2*c.distinct+artifact.GitExpansionFloor:
		return fmt.Errorf("%w: its files add up to %d bytes from %d bytes of distinct content (the same content under many paths)", ErrTree, stats.bytes, c.distinct)
	}
	return nil
}

func (c *treeCheck) visit(tree *object.Tree, dir string) (treeStats, error) {
	if s, ok := c.trees[tree.Hash]; ok {
		if len(dir)+s.deepest > artifact.MaxGitPath {
			return s, fmt.Errorf("%w: a path under %q is longer than %d bytes (a checkout refuses it)", ErrTree, trim(dir), artifact.MaxGitPath)
		}
		return s, nil
	}
	var s treeStats
	names := make([]string, len(tree.Entries))
	for i, e := range tree.Entries {
		names[i] = e.Name
	}
	slices.Sort(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			return s, fmt.Errorf("%w: entry %q twice in one tree", ErrTree, trim(path.Join(dir, names[i])))
		}
	}
	for _, e := range tree.Entries {
		if err := CheckTreePath(dir, e.Name); err != nil {
			return s, err
		}
		name := path.Join(dir, e.Name)
		rel := len(e.Name)
		switch e.Mode {
		case filemode.Dir:
			sub, err := object.GetTree(c.st, e.Hash)
			if err != nil {
				return s, fmt.Errorf("%w: %s: %w", ErrTree, trim(name), err)
			}
			ss, err := c.visit(sub, name)
			if err != nil {
				return s, err
			}
			s.entries += 1 + ss.entries
			s.bytes += ss.bytes
			if ss.deepest > 0 {
				rel += 1 + ss.deepest
			}
		case filemode.Regular, filemode.Deprecated, filemode.Executable:
			if dir == "" && slices.Contains(vcsFiles, e.Name) {
				continue
			}
			size, ok := c.blobs[e.Hash]
			if !ok {
				o, err := c.st.EncodedObject(plumbing.BlobObject, e.Hash)
				if err != nil {
					return s, fmt.Errorf("%w: %s: %w", ErrTree, trim(name), err)
				}
				size = o.Size()
				c.blobs[e.Hash] = size
				c.distinct += size
			}
			s.entries++
			s.bytes += size
		default:
			continue
		}
		s.deepest = max(s.deepest, rel)
		if s.entries > artifact.MaxGitEntries {
			return s, fmt.Errorf("%w: more than %d entries", ErrTree, artifact.MaxGitEntries)
		}
	}
	c.trees[tree.Hash] = s
	if len(dir)+s.deepest > artifact.MaxGitPath {
		return s, fmt.Errorf("%w: a path under %q is longer than %d bytes (a checkout refuses it)", ErrTree, trim(dir), artifact.MaxGitPath)
	}
	return s, nil
}

// trim shortens a path for a message.
func trim(p string) string {
	if len(p) > 200 {
		return p[:100] + "…" + p[len(p)-100:]
	}
	return p
}

// ErrTree is wrapped by the errors for a tree create refuses: an entry
// name a checkout would refuse, or a tree over a budget.
var ErrTree = errors.New("git tree refused")

// CheckTreePath checks one entry of a tree, name inside the folder dir
// ("" at the top), as git's checkout does (verify_path, with
// core.protectNTFS and core.protectHFS on, as they are by default where it
// matters): no empty name, ".", "..", "/", backslash or NUL in a name, no
// ".git" in any spelling a file system folds to it (".GIT", ".git.",
// "git~1", ".g\u200cit"), a name at most artifact.MaxGitName bytes and a
// path at most artifact.MaxGitPath bytes.
func CheckTreePath(dir, name string) error {
	full := name
	if dir != "" {
		full = dir + "/" + name
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: entry %q: %s (a checkout refuses it)", ErrTree, full, why)
	}
	switch {
	case name == "" || name == "." || name == "..":
		return bad("not a name")
	case strings.ContainsAny(name, "/\\\x00"):
		return bad("a slash, backslash or NUL in a name")
	case len(name) > artifact.MaxGitName:
		return bad(fmt.Sprintf("a name longer than %d bytes", artifact.MaxGitName))
	case len(full) > artifact.MaxGitPath:
		return bad(fmt.Sprintf("a path longer than %d bytes", artifact.MaxGitPath))
	case isDotGit(name):
		return bad("it names .git")
	}
	return nil
}

// isDotGit reports a name that a file system may take for ".git": any case,
// trailing dots and spaces (NTFS), the 8.3 short name (NTFS), and Unicode
// characters HFS+ ignores.
func isDotGit(name string) bool {
	n := strings.Map(func(r rune) rune {
		switch r {
		case '\u200c', '\u200d', '\u200e', '\u200f', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e',
			'\u206a', '\u206b', '\u206c', '\u206d', '\u206e', '\u206f', '\ufeff':
			return -1
		}
		return r
	}, name)
	n = strings.ToLower(strings.TrimRight(n, ". "))
	if i := strings.IndexByte(n, ':'); i >= 0 { // NTFS alternate data stream
		n = n[:i]
	}
	return n == ".git" || n == "git~1"
}

func walk(tw *tar.Writer, tree *object.Tree, dir string) error {
	entries := slices.Clone(tree.Entries)
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(a.Name, b.Name) })
	for _, e := range entries {
		name := path.Join(dir, e.Name)
		switch e.Mode {
		case filemode.Dir:
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return err
			}
			sub, err := tree.Tree(e.Name)
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrTree, name, err)
			}
			if err := walk(tw, sub, name); err != nil {
				return err
			}
		case filemode.Regular, filemode.Deprecated, filemode.Executable:
			if dir == "" && slices.Contains(vcsFiles, e.Name) {
				continue
			}
			mode := int64(0o644)
			if e.Mode == filemode.Executable {
				mode = 0o755
			}
			f, err := tree.TreeEntryFile(&e)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			rc, err := f.Reader()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: f.Size, Format: tar.FormatPAX})
			if err == nil {
				_, err = io.Copy(tw, rc)
			}
			rc.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		default: // symbolic links, submodules: Flux skips them
		}
	}
	return nil
}

// Bundle writes the history of res.Commit as a git bundle (v2, see
// gitformat-bundle(5)): the refs res.Ref (its own object: an annotated
// tag stays a tag) and HEAD, then a pack of every object they reach.
// `git clone` and `git bundle verify` read it; the same history gives the
// same bytes.
func Bundle(w io.Writer, r *git.Repository, res Resolved) error {
	commit := plumbing.NewHash(res.Commit)
	tips := []plumbing.Hash{commit}
	header := "# v2 git bundle\n"
	if res.Ref != "" {
		ref, err := r.Reference(plumbing.ReferenceName(res.Ref), true)
		if err != nil && strings.HasPrefix(res.Ref, "refs/heads/") { // a clone keeps branches as origin's
			ref, err = r.Reference(plumbing.NewRemoteReferenceName("origin", strings.TrimPrefix(res.Ref, "refs/heads/")), true)
		}
		if err != nil {
			return fmt.Errorf("%w %s: %w", ErrRef, res.Ref, err)
		}
		if ref.Hash() != commit {
			tag, err := r.TagObject(ref.Hash())
			if err != nil {
				return fmt.Errorf("%w %s moved from %s to %s while the package was made", ErrRef, res.Ref, res.Commit, ref.Hash())
			}
			c, err := tag.Commit()
			if err != nil || c.Hash != commit {
				return fmt.Errorf("%w %s moved from %s while the package was made", ErrRef, res.Ref, res.Commit)
			}
			tips = append(tips, ref.Hash())
		}
		header += ref.Hash().String() + " " + res.Ref + "\n"
	}
	header += commit.String() + " HEAD\n\n"
	objs, err := revlist.Objects(r.Storer, tips, nil)
	if err != nil {
		return fmt.Errorf("history of %s: %w", res.Commit, err)
	}
	slices.SortFunc(objs, func(a, b plumbing.Hash) int { return bytes.Compare(a[:], b[:]) })
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	if err := writePack(w, r.Storer, objs); err != nil {
		return fmt.Errorf("pack the history of %s: %w", res.Commit, err)
	}
	return nil
}

// Key is the identity of a repository URL, the same however it is
// spelled: host (lower case, without user information or the scheme's
// default port) and path, without a trailing ".git" or "/". So
// https://github.com/org/fleet.git, ssh://git@github.com:22/org/fleet and
// git@github.com:org/fleet.git are all "github.com/org/fleet". A local
// path (no host) is its cleaned path.
func Key(u string) string {
	host, p := splitURL(u)
	p = strings.TrimSuffix(strings.TrimSuffix(path.Clean("/"+p), "/"), ".git")
	if host == "" {
		return strings.TrimPrefix(p, "/")
	}
	return host + p
}

// RepositoryPath is where a repository's artifact goes in a registry: the
// URL's path without the host and ".git" (github.com/org/fleet → org/fleet),
// in lower case as registries require, like an image's path without its
// registry.
func RepositoryPath(u string) string {
	_, p := splitURL(u)
	p = strings.TrimSuffix(strings.Trim(path.Clean("/"+p), "/"), ".git")
	return strings.ToLower(p)
}

// splitURL splits a git URL into its host (lower case, no user, no
// default port) and path.
func splitURL(u string) (host, p string) {
	if !strings.Contains(u, "://") {
		// scp-like [user@]host:path, unless it is a local path.
		if i := strings.Index(u, ":"); i > 0 && !strings.Contains(u[:i], "/") {
			host = u[:i]
			if at := strings.LastIndex(host, "@"); at >= 0 {
				host = host[at+1:]
			}
			return strings.ToLower(host), u[i+1:]
		}
		return "", u
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", u
	}
	host = strings.ToLower(pu.Hostname())
	switch port := pu.Port(); {
	case port == "", pu.Scheme == "https" && port == "443", pu.Scheme == "http" && port == "80",
		pu.Scheme == "ssh" && port == "22", pu.Scheme == "git" && port == "9418":
	default:
		host += ":" + port
	}
	return host, pu.Path
}

// pushSpooled pushes to dst what write writes, spooled through a
// temporary file (a tree or a history may be large) and hashed on the way.
func pushSpooled(ctx context.Context, dst content.Pusher, mediaType string, write func(io.Writer) error) (ocispec.Descriptor, error) {
	f, err := os.CreateTemp("", "ferry-git-*")
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	dg := digest.SHA256.Digester()
	cw := &countingWriter{w: io.MultiWriter(f, dg.Hash())}
	if err := write(cw); err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ocispec.Descriptor{}, err
	}
	d := ocispec.Descriptor{MediaType: mediaType, Digest: dg.Digest(), Size: cw.n}
	return d, dst.Push(ctx, d, f)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
