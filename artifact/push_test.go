package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestPushPullRoundTrip: create → push → pull gives the same bytes, for
// both archive formats, by tag and by digest; a second push sends nothing.
func TestPushPullRoundTrip(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, ext := range []string{".tar.zst", ".tar"} {
		t.Run(ext, func(t *testing.T) {
			dir := t.TempDir()
			res := create(t, w, filepath.Join(dir, "demo"+ext))
			r, err := artifact.Open(ctx, res.Path)
			if err != nil {
				t.Fatal(err)
			}
			// A repository per format: the two archives hold one package
			// (one root), and a push to where it already is is "unchanged".
			repo := w.Host + "/pkgs/demo-" + strings.TrimPrefix(ext, ".")
			ref := repo + ":1.0.0"
			pr, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			if pr.Root.Digest != res.Root.Digest || pr.Pushed+pr.Skipped != res.Blobs {
				t.Errorf("push result %+v, want root %s and %d blobs", pr, res.Root.Digest, res.Blobs)
			}
			want, _ := os.ReadFile(res.Path)
			for _, from := range []string{ref, repo + "@" + res.Root.Digest.String()} {
				out := filepath.Join(t.TempDir(), "pulled"+ext)
				pl, err := pullRemote(ctx, from, out, artifact.PullOptions{})
				if err != nil {
					t.Fatalf("pull %s: %v", from, err)
				}
				got, _ := os.ReadFile(out)
				if !bytes.Equal(got, want) || pl.Root.Digest != res.Root.Digest {
					t.Fatalf("pull %s: %d bytes root %s, pushed %d bytes root %s", from, len(got), pl.Root.Digest, len(want), res.Root.Digest)
				}
			}
			again, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if again.Pushed != 0 || again.BytesPushed != 0 || !again.Unchanged {
				t.Errorf("second push uploaded %d blobs (%d bytes), unchanged %v; want 0, unchanged", again.Pushed, again.BytesPushed, again.Unchanged)
			}
			rep, err := inspectRemote(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Root != res.Root.Digest || rep.Blobs != res.Blobs || rep.Name != "demo" {
				t.Errorf("remote inspect: root %s blobs %d", rep.Root, rep.Blobs)
			}
		})
	}
}

// TestPushStreams: layers pushed in 1, 2 and 3 parallel walks over a
// .tar.zst, a .tar and a layout folder come back byte for byte; a damaged
// layer fails the push naming it, and neither it nor the root lands.
func TestPushStreams(t *testing.T) {
	ctx := context.Background()
	host := registrytest.New(t)
	dir := t.TempDir()
	layers := genImageSet(t, dir, 24) // 6 MiB layers: beyond the small-blob limit
	if len(layers) < 6 {
		t.Fatalf("fixture has %d blobs", len(layers))
	}
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, f := range []artifact.Format{artifact.FormatTarZstd, artifact.FormatTar} {
		p := filepath.Join(out, "big"+f.Ext())
		if _, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: p, Format: f}); err != nil {
			t.Fatal(err)
		}
	}
	layout := extractLayout(t, filepath.Join(out, "big.tar"))
	want, _ := os.ReadFile(filepath.Join(out, "big.tar"))
	for _, src := range []string{"big.tar.zst", "big.tar", layout} {
		for _, streams := range []int{1, 2, 3} {
			p := src
			if !filepath.IsAbs(p) {
				p = filepath.Join(out, src)
			}
			r, err := artifact.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			ref := fmt.Sprintf("%s/streams/%s-%d:1", host, strings.ReplaceAll(filepath.Base(src), ".", "-"), streams)
			res, err := artifact.Push(ctx, r, ref, artifact.PushOptions{Streams: streams})
			if err != nil {
				t.Fatalf("%s, %d streams: %v", src, streams, err)
			}
			if res.Pushed == 0 || res.Skipped != 0 || res.Root.Digest != r.Root().Digest {
				t.Fatalf("%s, %d streams: %+v", src, streams, res)
			}
			pulled := filepath.Join(t.TempDir(), "p.tar")
			if _, err := pullRemote(ctx, ref, pulled, artifact.PullOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(pulled); !bytes.Equal(got, want) {
				t.Fatalf("%s, %d streams: pulled %d bytes, want %d", src, streams, len(got), len(want))
			}
		}
	}

	// One flipped byte in the middle of the archive's largest entry.
	bad := filepath.Join(out, "bad.tar")
	b := bytes.Clone(want)
	off, size, name, err := fixture.LargestTarEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	b[off+size/2] ^= 1
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, streams := range []int{1, 3} {
		r, err := artifact.Open(ctx, bad)
		if err != nil {
			t.Fatal(err)
		}
		ref := fmt.Sprintf("%s/streams/bad-%d:1", host, streams)
		_, err = artifact.Push(ctx, r, ref, artifact.PushOptions{Streams: streams})
		d := strings.TrimPrefix(name, "blobs/sha256/")
		if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), d) {
			t.Fatalf("push of a damaged layer, %d streams: %v", streams, err)
		}
		var be *artifact.BlobError
		if !errors.As(err, &be) || be.Digest.Encoded() != d {
			t.Fatalf("push of a damaged layer, %d streams: %v does not carry the blob's digest", streams, err)
		}
		repo, _ := remote.NewRepository(ref)
		repo.PlainHTTP = true
		if ok, _ := repo.Blobs().Exists(ctx, ocispec.Descriptor{Digest: digest.NewDigestFromEncoded(digest.SHA256, d), Size: size}); ok {
			t.Fatalf("%d streams: the damaged layer was committed", streams)
		}
		if _, err := repo.Resolve(ctx, "1"); err == nil {
			t.Fatalf("%d streams: the root was tagged", streams)
		}
	}

	// Nothing is read when the registry holds the package: pushing the
	// damaged archive where the whole package is, even to a new tag, only
	// tags it ("unchanged"), and does not trip over the damaged copy.
	for _, tag := range []string{"1", "again"} {
		ref := fmt.Sprintf("%s/streams/big-tar-1:%s", host, tag)
		r, err := artifact.Open(ctx, bad)
		if err != nil {
			t.Fatal(err)
		}
		res, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
		if err != nil || !res.Unchanged || res.Pushed != 0 || res.BytesPushed != 0 {
			t.Fatalf("re-push of what the registry has, to tag %s: %+v, %v", tag, res, err)
		}
		repo, _ := remote.NewRepository(ref)
		repo.PlainHTTP = true
		if d, err := repo.Resolve(ctx, tag); err != nil || d.Digest != r.Root().Digest {
			t.Fatalf("tag %s after an unchanged push: %v, %v", tag, d.Digest, err)
		}
	}

	// A layer the registry has is not read either when the root is not
	// there: with the root manifest deleted, pushing the damaged archive
	// again walks it, uploads only the manifests, and passes over the
	// damaged layer.
	for _, streams := range []int{1, 3} {
		ref := fmt.Sprintf("%s/streams/big-tar-%d:1", host, streams)
		r, err := artifact.Open(ctx, bad)
		if err != nil {
			t.Fatal(err)
		}
		repo, _ := remote.NewRepository(ref)
		repo.PlainHTTP = true
		if err := repo.Delete(ctx, ocispec.Descriptor{MediaType: r.Root().MediaType, Digest: r.Root().Digest, Size: r.Root().Size}); err != nil {
			t.Fatal(err)
		}
		res, err := artifact.Push(ctx, r, ref, artifact.PushOptions{Streams: streams})
		if err != nil || res.Unchanged || res.Pushed != 1 || res.BytesPushed != r.Root().Size {
			t.Fatalf("re-push with %d streams of what the registry has but its root: %+v, %v", streams, res, err)
		}
	}
}

// TestErrorsNameTheReferenceOnce: a missing reference is named once, and
// the cause still matches errdef.ErrNotFound.
func TestErrorsNameTheReferenceOnce(t *testing.T) {
	w := newWorld(t)
	ref := w.Host + "/nope/pkg:1"
	_, err := inspectRemote(context.Background(), ref)
	if !errors.Is(err, errdef.ErrNotFound) || strings.Count(err.Error(), ref) != 1 {
		t.Fatalf("inspect of a missing package: %v; want %s named once, and errdef.ErrNotFound", err, ref)
	}
}

// TestProgressOneEventPerBlob: a push in parallel streams reports each blob
// once, as it is uploaded or found, with the bytes that moved; a verifying
// read reports each blob once, too. Events arrive concurrently.
func TestProgressOneEventPerBlob(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	type tally struct {
		mu    sync.Mutex
		seen  map[digest.Digest]int
		bytes int64
	}
	record := func(tl *tally, phase artifact.Phase) artifact.ProgressFunc {
		tl.seen = map[digest.Digest]int{}
		return func(ev artifact.Progress) {
			if ev.Partial {
				return
			}
			if ev.Phase != phase {
				t.Errorf("event of phase %q, want %q", ev.Phase, phase)
			}
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.seen[ev.Desc.Digest]++
			tl.bytes += ev.Bytes
		}
	}
	var pushed tally
	r := openPkg(t, res.Path)
	pr, err := artifact.Push(ctx, r, w.Host+"/progress/demo:1", artifact.PushOptions{Streams: 3, Progress: record(&pushed, artifact.PhasePush)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed.seen) != res.Blobs || pushed.bytes != pr.BytesPushed {
		t.Errorf("push: events for %d blobs with %d bytes; want %d blobs, %d bytes", len(pushed.seen), pushed.bytes, res.Blobs, pr.BytesPushed)
	}
	for d, n := range pushed.seen {
		if n != 1 {
			t.Errorf("push: %d events for %s", n, d)
		}
	}
	var read tally
	if _, err := artifact.Inspect(ctx, openPkg(t, res.Path), "", record(&read, artifact.PhaseRead)); err != nil {
		t.Fatal(err)
	}
	if len(read.seen) != res.Blobs {
		t.Errorf("inspect: events for %d blobs, want %d", len(read.seen), res.Blobs)
	}
}
