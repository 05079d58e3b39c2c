package artifact_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// events records progress events, from any goroutine.
type events struct {
	mu     sync.Mutex
	phases map[artifact.Phase]int
	blobs  map[digest.Digest]int
	bytes  int64
}

func (e *events) record() artifact.ProgressFunc {
	e.phases, e.blobs = map[artifact.Phase]int{}, map[digest.Digest]int{}
	return func(ev artifact.Progress) {
		if ev.Partial {
			return // a blob still moving: counted once it has (TestProgressMovesInBytes)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.phases[ev.Phase]++
		e.blobs[ev.Desc.Digest]++
		e.bytes += ev.Bytes
	}
}

// TestCopyTargetKinds: Copy moves a signed package between the kinds of
// target — package → registry (the streaming walk), registry → OCI layout
// store and layout store → registry (oras.CopyGraph) — reporting one
// PhaseCopy event per blob with the bytes it moved, counting what it did,
// and leaving a package that verifies with the key at its tag. Copied
// again, nothing moves.
func TestCopyTargetKinds(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	dir := t.TempDir()
	priv, pub := keyPair(t, dir, "kinds")
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	created, err := build.Create(ctx, def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(dir, "p.tar.zst"), SignKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	store, err := oci.New(filepath.Join(t.TempDir(), "layout"))
	if err != nil {
		t.Fatal(err)
	}
	pkgRepo := remoteRepo(t, w.Host+"/kinds/from-package:1.0.0")
	layoutRepo := remoteRepo(t, w.Host+"/kinds/from-layout:1.0.0")
	for _, tc := range []struct {
		name   string
		src    oras.ReadOnlyTarget
		srcRef string
		dst    oras.Target
	}{
		{"package → registry", openPkg(t, created.Path), "", pkgRepo},
		{"registry → layout", pkgRepo, "1.0.0", store},
		{"layout → registry", store, "1.0.0", layoutRepo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev events
			res, err := artifact.Copy(ctx, tc.src, tc.srcRef, tc.dst, "1.0.0", artifact.CopyOptions{Progress: ev.record()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Root.Digest != created.Root.Digest || res.Unchanged {
				t.Fatalf("copied root %s (unchanged %v), want %s", res.Root.Digest, res.Unchanged, created.Root.Digest)
			}
			// (oras.CopyGraph copies the signature's graph apart from the
			// root's: a blob both hold is copied once, then found.)
			if res.Copied != created.Blobs || len(ev.blobs) != created.Blobs || ev.bytes != res.BytesCopied || len(ev.phases) != 1 || ev.phases[artifact.PhaseCopy] != res.Copied+res.Skipped {
				t.Errorf("%d copied, %d skipped, %d bytes; events: %v for %d blobs, %d bytes; want all %d blobs copied, a PhaseCopy event each",
					res.Copied, res.Skipped, res.BytesCopied, ev.phases, len(ev.blobs), ev.bytes, created.Blobs)
			}
			if _, err := artifact.Verify(ctx, tc.dst, "1.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{pub}}); err != nil {
				t.Fatalf("verify the copy: %v", err)
			}
			var again events
			res, err = artifact.Copy(ctx, tc.src, tc.srcRef, tc.dst, "1.0.0", artifact.CopyOptions{Progress: again.record()})
			if err != nil || res.Copied != 0 || res.BytesCopied != 0 || again.bytes != 0 {
				t.Fatalf("copied again: %+v, events of %d bytes, %v; want nothing moved", res, again.bytes, err)
			}
		})
	}
}

// TestMirrorProgress: Mirror reports what it does as PhasePush events,
// concurrently: every blob of the package once as the package is pushed,
// then the images' blobs as they are mounted or copied into their own
// repositories; the bytes reported cover BytesPushed. Mirrored again, no
// event carries bytes.
func TestMirrorProgress(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	created := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	r := openPkg(t, created.Path)
	var ev events
	res, err := artifact.Mirror(ctx, r, w.Host+"/mirror", artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}, Progress: ev.record()})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.phases) != 1 || ev.phases[artifact.PhasePush] == 0 {
		t.Fatalf("events by phase: %v; want only %q", ev.phases, artifact.PhasePush)
	}
	sum, err := r.Walk(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Nodes) == 0 || len(res.Images) == 0 {
		t.Fatalf("%d manifests, %d images mirrored", len(sum.Nodes), len(res.Images))
	}
	for d := range sum.Nodes {
		if ev.blobs[d] == 0 {
			t.Errorf("no event for manifest %s", d)
		}
	}
	if len(ev.blobs) != created.Blobs {
		t.Errorf("events for %d blobs, the package has %d", len(ev.blobs), created.Blobs)
	}
	// Each image's manifest is reported again as it is copied into the
	// image's repository.
	for _, img := range res.Images {
		if n := ev.blobs[digest.Digest(img.Digest)]; n < 2 {
			t.Errorf("image %s (%s): %d events, want one for the package, one for its repository", img.Ref, img.Digest, n)
		}
	}
	if res.BytesPushed == 0 || ev.bytes < res.BytesPushed {
		t.Errorf("events of %d bytes, %d pushed", ev.bytes, res.BytesPushed)
	}
	var again events
	res, err = artifact.Mirror(ctx, openPkg(t, created.Path), w.Host+"/mirror", artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}, Progress: again.record()})
	if err != nil || res.BytesPushed != 0 || again.bytes != 0 || again.phases[artifact.PhasePush] == 0 {
		t.Fatalf("mirrored again: %d bytes pushed, events %v of %d bytes, %v; want events, no bytes", res.BytesPushed, again.phases, again.bytes, err)
	}
}

// TestPackageTarget: a package is a writable oras target for what signing
// adds and nothing else: its root keeps its one tag, other tags are
// errdef.ErrUnsupported, an archive takes no large blob, and a blob it
// holds is errdef.ErrAlreadyExists.
func TestPackageTarget(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	created := create(t, w, filepath.Join(t.TempDir(), "p.tar.zst"))
	for name, path := range map[string]string{"archive": created.Path, "layout": extractLayout(t, created.Path)} {
		r := openPkg(t, path)
		if err := r.Tag(ctx, r.Root(), "1.0.0"); err != nil {
			t.Errorf("%s: the root tagged with its version: %v", name, err)
		}
		if err := r.Tag(ctx, r.Root(), "latest"); !errors.Is(err, errdef.ErrUnsupported) {
			t.Errorf("%s: the root tagged latest: %v, want errdef.ErrUnsupported", name, err)
		}
		config := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(r.ConfigData()), Size: int64(len(r.ConfigData()))}
		if err := r.Tag(ctx, config, "other"); !errors.Is(err, errdef.ErrUnsupported) {
			t.Errorf("%s: another manifest tagged: %v, want errdef.ErrUnsupported", name, err)
		}
		blob := ocispec.Descriptor{MediaType: artifact.MediaTypeConfig, Digest: config.Digest, Size: config.Size}
		if err := r.Push(ctx, blob, strings.NewReader(string(r.ConfigData()))); name == "layout" && !errors.Is(err, errdef.ErrAlreadyExists) {
			t.Errorf("%s: a blob it holds pushed again: %v, want errdef.ErrAlreadyExists", name, err)
		}
		big := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromString("big"), Size: artifact.MaxManifestSize + 1}
		if err := r.Push(ctx, big, strings.NewReader("")); name == "archive" && !errors.Is(err, errdef.ErrUnsupported) {
			t.Errorf("%s: a large blob pushed: %v, want errdef.ErrUnsupported", name, err)
		}
	}
}
