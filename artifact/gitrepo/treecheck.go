package gitrepo

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ferrypkg/ferry/artifact"
)

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
