// Command gitclone is the git client of the e2e tests' Pods: a static
// binary that clones a repository over HTTP with go-git, as Flux's
// source-controller does, and prints what it got.
//
//	gitclone URL [DEPTH]
//
// It clones URL into memory (DEPTH commits, all when 0 or absent; the
// user name and password in $GIT_USERNAME and $GIT_PASSWORD) and prints
// one line: "head <commit> tree <tree> commits <n> files <n>". It exits 1
// on any error, printing it.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gitclone:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return fmt.Errorf("usage: gitclone URL [DEPTH]")
	}
	depth := 0
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("depth %q: %w", args[1], err)
		}
		depth = n
	}
	opts := &git.CloneOptions{URL: args[0], Depth: depth, NoCheckout: true}
	if u := os.Getenv("GIT_USERNAME"); u != "" {
		opts.Auth = &http.BasicAuth{Username: u, Password: os.Getenv("GIT_PASSWORD")}
	}
	r, err := git.CloneContext(context.Background(), memory.NewStorage(), nil, opts)
	if err != nil {
		return err
	}
	head, err := r.Head()
	if err != nil {
		return err
	}
	c, err := r.CommitObject(head.Hash())
	if err != nil {
		return err
	}
	tree, err := c.Tree()
	if err != nil {
		return err
	}
	files := 0
	if err := tree.Files().ForEach(func(*object.File) error { files++; return nil }); err != nil {
		return err
	}
	commits := 0
	iter, err := r.Log(&git.LogOptions{From: head.Hash()})
	if err != nil {
		return err
	}
	_ = iter.ForEach(func(*object.Commit) error { commits++; return nil })
	fmt.Printf("head %s tree %s commits %d files %d\n", c.Hash, tree.Hash, commits, files)
	return nil
}
