package gitrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

// FuzzTree feeds arbitrary tree objects (with one blob and one sub-tree
// they may name) to CheckTree and, when it passes, to the tar writer: no
// panic, and every entry of the tar is a local path without a .git.
func FuzzTree(f *testing.F) {
	st := memory.NewStorage()
	blob := st.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	w, _ := blob.Writer()
	w.Write([]byte("content"))
	w.Close()
	bh, _ := st.SetEncodedObject(blob)
	sub := rawTree(st, fmt.Sprintf("100644 f\x00%s", bh[:]))
	for _, seed := range []string{
		fmt.Sprintf("100644 a\x00%s", bh[:]),
		fmt.Sprintf("40000 d\x00%s100644 e\x00%s", sub[:], bh[:]),
		fmt.Sprintf("100644 /x/y\x00%s", bh[:]),
		fmt.Sprintf("100644 ..\x00%s", bh[:]),
		fmt.Sprintf("40000 .git\x00%s", sub[:]),
		fmt.Sprintf("100755 run.sh\x00%s120000 l\x00%s160000 m\x00%s", bh[:], bh[:], bh[:]),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := rawTree(st, string(data))
		tree, err := object.GetTree(st, h)
		if err != nil {
			return
		}
		if CheckTree(st, tree) != nil {
			return
		}
		var buf bytes.Buffer
		if err := writeTree(&buf, tree); err != nil {
			return
		}
		zr, err := gzip.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			if !filepath.IsLocal(name) || strings.Contains(name, "\\") {
				t.Fatalf("tar entry %q is not a local path", hdr.Name)
			}
			for _, part := range strings.Split(name, "/") {
				if isDotGit(part) {
					t.Fatalf("tar entry %q names .git", hdr.Name)
				}
			}
		}
	})
}

// rawTree stores data as a tree object as it is.
func rawTree(st *memory.Storage, data string) plumbing.Hash {
	o := st.NewEncodedObject()
	o.SetType(plumbing.TreeObject)
	w, _ := o.Writer()
	w.Write([]byte(data))
	w.Close()
	h, _ := st.SetEncodedObject(o)
	return h
}
