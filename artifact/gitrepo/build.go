package gitrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/revlist"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/internal/scratch"
)

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

// walk writes tree's folders and files, under dir, to tw in lexical order
// (links and submodules left out, as Flux skips them).
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

// pushSpooled pushes to dst what write writes, spooled through a
// temporary file (a tree or a history may be large) and hashed on the way.
// The file is made by internal/scratch, so that one left by a killed
// process is removed by the next ferry that makes a temporary there.
func pushSpooled(ctx context.Context, dst content.Pusher, mediaType string, write func(io.Writer) error) (ocispec.Descriptor, error) {
	f, err := scratch.CreateTemp("", "ferry-git-*")
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
