package gitrepo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
)

// rawRepo is a bare repository under construction, its objects written by
// hand (go-git's encoders check nothing), so that a test can make the trees
// a hostile repository would hold.
type rawRepo struct {
	t   *testing.T
	dir string
	st  *filesystem.Storage
}

func newRawRepo(t *testing.T) *rawRepo {
	dir := t.TempDir()
	for _, d := range []string{"objects", "refs/heads", "refs/tags"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte("[core]\n\trepositoryformatversion = 0\n\tbare = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &rawRepo{t: t, dir: dir, st: filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())}
}

func (r *rawRepo) blob(data []byte) plumbing.Hash {
	o := r.st.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, _ := o.Writer()
	w.Write(data)
	w.Close()
	h, err := r.st.SetEncodedObject(o)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// tree stores a tree with entries as given: names are not checked, nor
// sorted.
func (r *rawRepo) tree(entries ...object.TreeEntry) plumbing.Hash {
	o := r.st.NewEncodedObject()
	o.SetType(plumbing.TreeObject)
	w, _ := o.Writer()
	for _, e := range entries {
		fmt.Fprintf(w, "%o %s\x00", e.Mode, e.Name)
		w.Write(e.Hash[:])
	}
	w.Close()
	h, err := r.st.SetEncodedObject(o)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// commit stores a commit of tree and points main at it.
func (r *rawRepo) commit(tree plumbing.Hash) string {
	sig := object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000, 0).UTC()}
	o := r.st.NewEncodedObject()
	if err := (&object.Commit{Author: sig, Committer: sig, Message: "x\n", TreeHash: tree}).Encode(o); err != nil {
		r.t.Fatal(err)
	}
	h, err := r.st.SetEncodedObject(o)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.st.SetReference(plumbing.NewHashReference("refs/heads/main", h)); err != nil {
		r.t.Fatal(err)
	}
	return h.String()
}

// build opens the repository, resolves main and builds its artifact.
func (r *rawRepo) build(history bool) error {
	ctx := context.Background()
	repo, err := Open(ctx, Source{URL: "https://git.example/o/r.git", Path: r.dir}, nil)
	if err != nil {
		return err
	}
	res, err := Resolve(repo, Source{URL: "https://git.example/o/r.git", Ref: "main"})
	if err != nil {
		return err
	}
	_, err = Build(ctx, repo, res, history, memory.New())
	return err
}

func file(name string, h plumbing.Hash) object.TreeEntry {
	return object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h}
}

func dir(name string, h plumbing.Hash) object.TreeEntry {
	return object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
}

// TestTreeNamesRefused: every entry name a checkout refuses is refused by
// create, naming the entry, whether the history travels or not.
func TestTreeNamesRefused(t *testing.T) {
	long := strings.Repeat("n", artifact.MaxGitName+1)
	for _, name := range []string{"/x/y", "/etc", "..", ".", "", "a/b", `a\b`, ".git", ".GIT", ".git.", ".git ", "git~1", ".g\u200cit", ".git:stream", long} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			r := newRawRepo(t)
			b := r.blob([]byte("x"))
			inner := r.tree(file("f", b))
			// At the top, and one folder down.
			for _, top := range []plumbing.Hash{r.tree(file(name, b)), r.tree(dir("d", r.tree(file(name, b), file("g", b)))), r.tree(dir(name, inner))} {
				r.commit(top)
				for _, history := range []bool{false, true} {
					err := r.build(history)
					if !errors.Is(err, ErrTree) || strings.Contains(err.Error(), "\n") {
						t.Fatalf("history %v: %v, want a one-line ErrTree", history, err)
					}
				}
			}
		})
	}
}

// TestTreeDuplicateRefused: a tree naming one entry twice is refused.
func TestTreeDuplicateRefused(t *testing.T) {
	r := newRawRepo(t)
	r.commit(r.tree(file("a", r.blob([]byte("1"))), file("a", r.blob([]byte("2")))))
	if err := r.build(false); !errors.Is(err, ErrTree) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("%v, want ErrTree (twice)", err)
	}
}

// TestTreeDeepRefused: a tree 20,000 folders deep (each tree object a few
// bytes: a 1 MB repository) is refused once its paths pass MaxGitPath,
// before most of it is read.
func TestTreeDeepRefused(t *testing.T) {
	r := newRawRepo(t)
	made := time.Now()
	h := r.tree(file("f", r.blob([]byte("leaf"))))
	for range 20000 {
		h = r.tree(dir("a", h))
	}
	r.commit(h)
	start := time.Now()
	err := r.build(false)
	t.Logf("made in %v, refused in %v", start.Sub(made), time.Since(start))
	if !errors.Is(err, ErrTree) || !strings.Contains(err.Error(), fmt.Sprintf("longer than %d bytes", artifact.MaxGitPath)) {
		t.Fatalf("%.200v, want ErrTree (path too long)", err)
	}
	if len(err.Error()) > artifact.MaxGitPath+300 {
		t.Errorf("the error is %d bytes long", len(err.Error()))
	}
}

// TestTreeBombRefused: one blob under many paths (a git bomb: 1 MiB
// stored, 200 MiB in the tar) is refused; the same content under a few
// paths is not.
func TestTreeBombRefused(t *testing.T) {
	r := newRawRepo(t)
	big := make([]byte, 1<<20)
	rand.Read(big)
	b := r.blob(big)
	var entries []object.TreeEntry
	for i := range 200 {
		entries = append(entries, file(fmt.Sprintf("copy-%03d", i), b))
	}
	r.commit(r.tree(dir("x", r.tree(entries...))))
	if err := r.build(false); !errors.Is(err, ErrTree) || !strings.Contains(err.Error(), "distinct content") {
		t.Fatalf("%v, want ErrTree (expansion)", err)
	}
	r.commit(r.tree(entries[:10]...))
	if err := r.build(true); err != nil {
		t.Fatalf("ten copies: %v", err)
	}
}

// TestTreeEntriesBudget: a tree over MaxGitEntries is refused. (Made of
// folders each naming one shared subtree, so it costs a few KB.)
func TestTreeEntriesBudget(t *testing.T) {
	r := newRawRepo(t)
	b := r.blob(nil)
	var leaf []object.TreeEntry
	for i := range 1000 {
		leaf = append(leaf, file(fmt.Sprintf("f%04d", i), b))
	}
	mid := r.tree(leaf...)
	var top []object.TreeEntry
	for i := range artifact.MaxGitEntries/1000 + 1 {
		top = append(top, dir(fmt.Sprintf("d%04d", i), mid))
	}
	r.commit(r.tree(top...))
	if err := r.build(false); !errors.Is(err, ErrTree) || !strings.Contains(err.Error(), "entries") {
		t.Fatalf("%v, want ErrTree (entries)", err)
	}
}

// TestLocalConfined: a repository read from a definition's folder is read
// there only — whatever its .git file, commondir, alternates or links name
// — and a worktree or a gitdir inside the folder still works.
func TestLocalConfined(t *testing.T) {
	src, _, second := repo(t)
	ctx := context.Background()
	open := func(defDir, path string) (*Resolved, error) {
		root, err := os.OpenRoot(defDir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		r, err := Open(ctx, Source{URL: "https://git.example/o/r.git", Path: path, Root: root}, nil)
		if err != nil {
			return nil, err
		}
		res, err := Resolve(r, Source{URL: "https://git.example/o/r.git", Ref: "main"})
		if err != nil {
			return nil, err
		}
		if _, err := Build(ctx, r, res, true, memory.New()); err != nil {
			return nil, err
		}
		return &res, nil
	}
	escapes := func(name, defDir, path string) {
		t.Helper()
		if res, err := open(defDir, path); !errors.Is(err, confine.ErrEscapes) && (err == nil || !strings.Contains(err.Error(), "invalid object directory")) {
			t.Errorf("%s: %v (%+v), want it refused as leading outside the folder", name, err, res)
		}
	}

	// .git is a file naming a git folder outside (absolute, relative).
	defDir := t.TempDir()
	os.MkdirAll(filepath.Join(defDir, "abs"), 0o755)
	os.WriteFile(filepath.Join(defDir, "abs", ".git"), []byte("gitdir: "+filepath.Join(src, ".git")+"\n"), 0o644)
	escapes(".git file, absolute gitdir", defDir, "abs")
	rel, _ := filepath.Rel(filepath.Join(defDir, "rel"), filepath.Join(src, ".git"))
	os.MkdirAll(filepath.Join(defDir, "rel"), 0o755)
	os.WriteFile(filepath.Join(defDir, "rel", ".git"), []byte("gitdir: "+rel+"\n"), 0o644)
	escapes(".git file, relative gitdir", defDir, "rel")

	// .git is a link to a repository outside.
	os.MkdirAll(filepath.Join(defDir, "link"), 0o755)
	os.Symlink(filepath.Join(src, ".git"), filepath.Join(defDir, "link", ".git"))
	escapes(".git link", defDir, "link")

	// A git folder of its own whose commondir (where a worktree's objects
	// and refs are) is outside.
	os.MkdirAll(filepath.Join(defDir, "common", ".git"), 0o755)
	os.WriteFile(filepath.Join(defDir, "common", ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(defDir, "common", ".git", "commondir"), []byte(filepath.Join(src, ".git")+"\n"), 0o644)
	escapes("commondir", defDir, "common")

	// Alternates naming the outside repository's objects.
	gitRun(t, "", "init", "-q", "--bare", filepath.Join(defDir, "alt"))
	os.MkdirAll(filepath.Join(defDir, "alt", "objects", "info"), 0o755)
	os.WriteFile(filepath.Join(defDir, "alt", "objects", "info", "alternates"), []byte(filepath.Join(src, ".git", "objects")+"\n"), 0o644)
	os.WriteFile(filepath.Join(defDir, "alt", "refs", "heads", "main"), []byte(second+"\n"), 0o644)
	if res, err := open(defDir, "alt"); err == nil {
		t.Errorf("alternates outside: read %+v", res)
	}

	// The repository's folder itself is a link out.
	os.Symlink(src, filepath.Join(defDir, "dirlink"))
	escapes("folder link", defDir, "dirlink")

	// Inside the folder: a clone, a worktree of it (its .git a file with an
	// absolute gitdir, and a commondir), all fine.
	inside := t.TempDir()
	gitRun(t, "", "clone", "-q", src, filepath.Join(inside, "main"))
	gitRun(t, filepath.Join(inside, "main"), "worktree", "add", "-q", filepath.Join(inside, "wt"), "dev")
	for _, p := range []string{"main", "wt"} {
		res, err := open(inside, p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if res.Commit != second {
			t.Errorf("%s: commit %s, want %s", p, res.Commit, second)
		}
	}
}

// TestURLRefused: URLs whose query, fragment or control characters would
// put a token or junk into the package are refused, and no message carries
// the secret.
func TestURLRefused(t *testing.T) {
	for _, u := range []string{"host:o/c.git?tok=s3cr3t", "https://h/o/c.git?access_token=s3cr3t", "https://h/o/c.git#s3cr3t", "https://u:s3cr3t@h/o/c.git", "https://h/o\n/c.git", "me:s3cr3t@h:o/c.git", "me:s3/cr3t@h:o/c.git", "https://u:s3/cr3t@h/o/c.git"} {
		_, err := CleanURL(u)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want a one-line refusal without the secret", u, err)
		}
	}
}

// TestCloneErrorRedacted: a clone that fails does not print the token
// given as the URL's user name.
func TestCloneErrorRedacted(t *testing.T) {
	tmp := t.TempDir()
	_, err := Open(context.Background(), Source{URL: "http://ghp_s3cr3t@127.0.0.1:1/o/r.git", CloneDir: tmp}, nil)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("%v, want an error without the token", err)
	}
}
