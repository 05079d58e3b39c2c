package gitserver_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/deploy/gitserver"
)

// TestFromRegistry: a repository carried as gitrepo's artifact is found in
// a registry (here oras-go's memory store) by its manifest digest and
// cloned shallow; entries that do not match their artifact are refused.
func TestFromRegistry(t *testing.T) {
	ctx := context.Background()
	src := makeSource(t)
	stores := map[string]*memory.Store{"org/fleet": memory.New(), "org/tree-only": memory.New()}
	build := func(ref string, history bool, store *memory.Store) (gitrepo.Resolved, ocispec.Descriptor) {
		s := gitrepo.Source{URL: testURL, Path: src.dir, Ref: ref}
		r, err := gitrepo.Open(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := gitrepo.Resolve(r, s)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := gitrepo.Build(ctx, r, res, history, store)
		if err != nil {
			t.Fatal(err)
		}
		return res, desc
	}
	res, withHistory := build("main", true, stores["org/fleet"])
	_, treeOnly := build("main", false, stores["org/tree-only"])
	entry := gitserver.Entry{URL: testURL, Ref: res.Ref, Commit: res.Commit, Repository: gitrepo.RepositoryPath(testURL), Digest: withHistory.Digest, Size: withHistory.Size}
	var opened []string
	open := func(_ context.Context, repository string) (oras.ReadOnlyTarget, error) {
		opened = append(opened, repository)
		if s, ok := stores[repository]; ok {
			return s, nil
		}
		return nil, errors.New("no such repository")
	}
	for _, c := range []struct {
		name   string
		edit   func(*gitserver.Entry)
		status int
	}{
		{"ok", func(*gitserver.Entry) {}, 200},
		{"tree only", func(e *gitserver.Entry) {
			e.Digest, e.Size, e.Repository = treeOnly.Digest, treeOnly.Size, "org/tree-only"
		}, 404},
		{"other commit", func(e *gitserver.Entry) { e.Commit = src.first }, 502},
		{"other url", func(e *gitserver.Entry) { e.URL = "https://elsewhere.example.com/org/fleet" }, 404},
		{"missing", func(e *gitserver.Entry) { e.Digest, e.Size = digest.FromString("nothing"), 0 }, 502},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := entry
			c.edit(&e)
			lookup := gitserver.FromRegistry(func(context.Context) ([]gitserver.Entry, error) { return []gitserver.Entry{e}, nil }, open)
			url, _ := serve(t, lookup)
			resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("info/refs: %s, want %d", resp.Status, c.status)
			}
			if c.status != 200 {
				return
			}
			dst := filepath.Join(t.TempDir(), "clone")
			mustGit(t, "", "clone", "-q", "--depth", "1", url, dst)
			if got := mustGit(t, dst, "rev-parse", "HEAD"); got != src.second {
				t.Errorf("HEAD = %s, want %s", got, src.second)
			}
		})
	}
	if len(opened) == 0 || opened[0] != "org/fleet" {
		t.Errorf("opened %v, want org/fleet", opened)
	}
}
