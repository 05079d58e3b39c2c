package artifact_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// deltaPair is a package at two versions: v1 of four images sharing a base
// layer, v2 with the last image changed (a new layer of its own).
type deltaPair struct {
	V1, V2 string
	// Changed is the bytes of the changed image that v1 does not hold:
	// its manifest, config and new layer.
	Changed int64
}

// makeDeltaPair creates v1 and v2 (layers of layerSize bytes), v2 signed
// with sk when it is not nil.
func makeDeltaPair(t testing.TB, layerSize int, sk artifact.Signer) deltaPair {
	t.Helper()
	ctx := context.Background()
	rng := fixture.Rand(7)
	base := fixture.NewLayer(rng, layerSize)
	var own []fixture.Layer
	for range 5 {
		own = append(own, fixture.NewLayer(rng, layerSize))
	}
	amd := fixture.Platform("linux", "amd64", "")
	var out deltaPair
	for v, path := range []*string{&out.V1, &out.V2} {
		dir := t.TempDir()
		store, err := oci.New(filepath.Join(dir, "images"))
		if err != nil {
			t.Fatal(err)
		}
		def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: app, version: %d.0.0}\nplatforms: [linux/amd64]\ncomponents:\n  - name: app\n    images:\n", v+1)
		for i := range 4 {
			layer := own[i]
			if v == 1 && i == 3 {
				layer = own[4]
			}
			d, err := fixture.PushImage(ctx, store, amd, []fixture.Layer{base, layer})
			if err != nil {
				t.Fatal(err)
			}
			tag := fmt.Sprintf("img%d", i)
			if err := store.Tag(ctx, d, tag); err != nil {
				t.Fatal(err)
			}
			def += fmt.Sprintf("      - {ref: example.com/app/img%d:1, layout: images, tag: %s}\n", i, tag)
			if v == 1 && i == 3 {
				data, err := content.FetchAll(ctx, store, d)
				if err != nil {
					t.Fatal(err)
				}
				var m ocispec.Manifest
				if err := json.Unmarshal(data, &m); err != nil {
					t.Fatal(err)
				}
				out.Changed = d.Size + m.Config.Size + m.Layers[1].Size
			}
		}
		writeFile(t, filepath.Join(dir, definition.FileName), def)
		d, err := definition.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		*path = filepath.Join(t.TempDir(), fmt.Sprintf("app-%d.tar.zst", v+1))
		if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: *path}); err != nil {
			t.Fatal(err)
		}
	}
	if sk != nil {
		if _, err := artifact.Sign(ctx, openPkg(t, out.V2), "", sk, artifact.SignOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// blobEntries lists the digests of an archive's blob entries.
func blobEntries(t testing.TB, path string) []digest.Digest {
	t.Helper()
	var out []digest.Digest
	for _, e := range readTar(t, path) {
		if hex, ok := strings.CutPrefix(e.Header.Name, "blobs/sha256/"); ok && hex != "" {
			out = append(out, digest.NewDigestFromEncoded(digest.SHA256, hex))
		}
	}
	slices.Sort(out)
	return out
}

func have(t testing.TB, path string) *artifact.Receipt {
	t.Helper()
	rc, err := artifact.Have(context.Background(), openPkg(t, path), "")
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func registryOf(t testing.TB, host string) *remote.Registry {
	t.Helper()
	reg, err := artifact.RemoteOptions{}.Registry(host)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func catalog(t testing.TB, host string) []string {
	t.Helper()
	var repos []string
	if err := registryOf(t, host).Repositories(context.Background(), "", func(p []string) error { repos = append(repos, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	return repos
}

// TestDeltaRoundTrip: a receipt of a registry holding v1 lists what v1's
// package lists; the delta of v2 against it carries exactly the blobs v1
// lacks and says what it leaves out; read alone it verifies as far as it
// goes; pushed into the registry it completes v2, which then verifies whole
// and pulls back byte for byte as v2.
func TestDeltaRoundTrip(t *testing.T) {
	ctx := context.Background()
	sk, pk := keyPair(t, t.TempDir(), "k")
	pair := makeDeltaPair(t, 32<<10, sk)
	host := registrytest.New(t)
	if _, err := artifact.Push(ctx, openPkg(t, pair.V1), host+"/app:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}

	fromRegistry, err := artifact.HaveRegistry(ctx, registryOf(t, host), host, "")
	if err != nil {
		t.Fatal(err)
	}
	fromPackage := have(t, pair.V1)
	if !equalKeys(fromRegistry.Blobs, fromPackage.Blobs) {
		t.Fatalf("receipt of the registry lists %d blobs, of the package %d", len(fromRegistry.Blobs), len(fromPackage.Blobs))
	}
	// Written and read again, a receipt is the same.
	data, err := fromRegistry.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := artifact.ParseReceipt(data)
	if err != nil || !equalKeys(back.Blobs, fromRegistry.Blobs) || back.Source != host {
		t.Fatalf("receipt read back: %+v, %v", back, err)
	}

	out := filepath.Join(t.TempDir(), "update.tar.zst")
	res, err := artifact.Delta(ctx, openPkg(t, pair.V2), fromRegistry, out, artifact.DeltaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Exactly what v1 lacks.
	v2 := have(t, pair.V2)
	var want []digest.Digest
	shared := 0
	for d := range v2.Blobs {
		if _, ok := fromPackage.Blobs[d]; ok {
			shared++
			continue
		}
		want = append(want, d)
	}
	slices.Sort(want)
	if got := blobEntries(t, out); !slices.Equal(got, want) {
		t.Fatalf("the delta carries %d blobs %v, want the %d v1 lacks %v", len(got), got, len(want), want)
	}
	if res.Carried != len(want) || res.Omitted != shared {
		t.Fatalf("result: carried %d omitted %d, want %d and %d", res.Carried, res.Omitted, len(want), shared)
	}

	// Read alone: what it carries, and what it leaves out.
	rep, err := artifact.Inspect(ctx, openPkg(t, out), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delta == nil || len(rep.Delta.Omitted) != shared || rep.Delta.Base != host || rep.Blobs != len(want) {
		t.Fatalf("inspect: delta %+v, %d blobs", rep.Delta, rep.Blobs)
	}
	if _, err := verifyFile(out, pk); err != nil {
		t.Fatalf("verify the delta alone: %v", err)
	}

	// Pushed where v1 is: v2 complete, verified whole.
	pushed, err := artifact.Push(ctx, openPkg(t, out), host+"/app:2.0.0", artifact.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pushed.Pushed != len(want) || pushed.Skipped != shared {
		t.Fatalf("push: %d uploaded, %d skipped; want %d and %d", pushed.Pushed, pushed.Skipped, len(want), shared)
	}
	if _, err := verifyRemote(ctx, host+"/app:2.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{pk}}); err != nil {
		t.Fatalf("v2 in the registry: %v", err)
	}
	assertPullsBack(t, ctx, host+"/app:2.0.0", pair.V2, "v2 pulled back from the registry")
}

func equalKeys(a, b map[digest.Digest]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for d, s := range a {
		if bs, ok := b[d]; !ok || bs != s {
			return false
		}
	}
	return true
}

// TestDeltaMirror: deploy's and registry load's push (Mirror) completes a
// delta too, its images under their own paths.
func TestDeltaMirror(t *testing.T) {
	ctx := context.Background()
	pair := makeDeltaPair(t, 16<<10, nil)
	host := registrytest.New(t)
	if _, err := artifact.Mirror(ctx, openPkg(t, pair.V1), host, artifact.MirrorOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := artifact.HaveRegistry(ctx, registryOf(t, host), host, "")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "update.tar")
	if _, err := artifact.Delta(ctx, openPkg(t, pair.V2), rc, out, artifact.DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := artifact.Mirror(ctx, openPkg(t, out), host, artifact.MirrorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Images) != 4 || res.Package != "app:2.0.0" {
		t.Fatalf("mirror: %+v", res)
	}
	if _, err := inspectRemote(ctx, host+"/app/img3:1"); err == nil {
		t.Fatal("an image inspected as a package")
	}
	if _, err := artifact.Verify(ctx, remoteRepo(t, host+"/app"), "2.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{unusedKey(t)}}); !errors.Is(err, artifact.ErrNoSignature) {
		t.Fatalf("unsigned v2 verified: %v", err)
	}
	if _, err := inspectRemote(ctx, host+"/app:2.0.0"); err != nil {
		t.Fatal(err)
	}
}

func unusedKey(t testing.TB) artifact.Verifier {
	_, pk := keyPair(t, t.TempDir(), "unused")
	return pk
}

// TestDeltaMissingBlobs: pushed into a registry that lacks what it leaves
// out, a delta is refused before anything is written, naming the blobs.
func TestDeltaMissingBlobs(t *testing.T) {
	ctx := context.Background()
	pair := makeDeltaPair(t, 16<<10, nil)
	out := filepath.Join(t.TempDir(), "update.tar.zst")
	res, err := artifact.Delta(ctx, openPkg(t, pair.V2), have(t, pair.V1), out, artifact.DeltaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := registrytest.New(t)
	_, err = artifact.Push(ctx, openPkg(t, out), host+"/app:2.0.0", artifact.PushOptions{})
	var me *artifact.MissingBlobsError
	if !errors.As(err, &me) || !errors.Is(err, artifact.ErrMissingBlobs) {
		t.Fatalf("push into an empty registry: %v", err)
	}
	if len(me.Missing) != res.Omitted || me.Omitted != res.Omitted {
		t.Fatalf("names %d missing of %d, want all %d", len(me.Missing), me.Omitted, res.Omitted)
	}
	if !strings.Contains(err.Error(), me.Missing[0].Digest.String()) || !strings.Contains(err.Error(), fmt.Sprintf("and %d more", res.Omitted-3)) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("message: %v", err)
	}
	if repos := catalog(t, host); len(repos) != 0 {
		t.Fatalf("the registry holds %v after a refused delta", repos)
	}
	// Nor into one that holds part of it.
	partial := makeDeltaPair(t, 8<<10, nil)
	if _, err := artifact.Push(ctx, openPkg(t, partial.V1), host+"/app:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	before := catalog(t, host)
	if _, err = artifact.Push(ctx, openPkg(t, out), host+"/app:2.0.0", artifact.PushOptions{}); !errors.As(err, &me) {
		t.Fatalf("push into a registry holding another v1: %v", err)
	}
	if _, err := remoteRepo(t, host+"/app").Resolve(ctx, "2.0.0"); err == nil {
		t.Fatal("2.0.0 tagged after a refused delta")
	}
	if after := catalog(t, host); !slices.Equal(before, after) {
		t.Fatalf("repositories %v became %v", before, after)
	}
}

// TestDeltaTamperedBase: a blob the delta leaves out that the registry holds
// damaged is found when read back, named, and nothing is tagged.
func TestDeltaTamperedBase(t *testing.T) {
	ctx := context.Background()
	pair := makeDeltaPair(t, 16<<10, nil)
	root := t.TempDir()
	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))
	if _, err := artifact.Push(ctx, openPkg(t, pair.V1), host+"/app:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "update.tar.zst")
	res, err := artifact.Delta(ctx, openPkg(t, pair.V2), have(t, pair.V1), out, artifact.DeltaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := openPkg(t, out).Delta()
	if info == nil || len(info.Omitted) != res.Omitted {
		t.Fatalf("delta info %+v", info)
	}
	// The largest blob left out: a layer.
	omitted := slices.Clone(info.Omitted)
	sort.Slice(omitted, func(i, j int) bool { return omitted[i].Size > omitted[j].Size })
	victim := omitted[0].Digest
	data := filepath.Join(root, "docker/registry/v2/blobs/sha256", victim.Encoded()[:2], victim.Encoded(), "data")
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(data, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = artifact.Push(ctx, openPkg(t, out), host+"/app:2.0.0", artifact.PushOptions{})
	var be *artifact.BlobError
	if !errors.As(err, &be) || be.Digest != victim || !errors.Is(err, artifact.ErrCorrupt) {
		t.Fatalf("push over a damaged base: %v", err)
	}
	if _, err := remoteRepo(t, host+"/app").Resolve(ctx, "2.0.0"); err == nil {
		t.Fatal("2.0.0 tagged over a damaged base")
	}
}

// TestDeltaReadAlone: a delta refuses what needs every blob (sign, another
// delta, a receipt), and its list must match what it carries.
func TestDeltaReadAlone(t *testing.T) {
	ctx := context.Background()
	sk, _ := keyPair(t, t.TempDir(), "k")
	pair := makeDeltaPair(t, 8<<10, nil)
	out := filepath.Join(t.TempDir(), "update.tar")
	if _, err := artifact.Delta(ctx, openPkg(t, pair.V2), have(t, pair.V1), out, artifact.DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	r := openPkg(t, out)
	if _, err := artifact.Sign(ctx, r, "", sk, artifact.SignOptions{}); err == nil {
		t.Fatal("signed a delta")
	}
	if _, err := artifact.Delta(ctx, r, have(t, pair.V1), filepath.Join(t.TempDir(), "x.tar"), artifact.DeltaOptions{}); err == nil {
		t.Fatal("made a delta of a delta")
	}
	if _, err := artifact.Have(ctx, r, ""); err == nil {
		t.Fatal("a receipt of a delta")
	}
	// ferry-delta.json listing a blob it carries, or one not in the graph.
	entries := readTar(t, out)
	for _, tc := range []struct {
		name string
		edit func(*artifact.DeltaInfo)
	}{
		{"carried", func(d *artifact.DeltaInfo) {
			d.Omitted = append(d.Omitted, ocispec.Descriptor{MediaType: "application/octet-stream", Digest: r.Root().Digest, Size: r.Root().Size})
		}},
		{"dropped", func(d *artifact.DeltaInfo) {
			// An image manifest: the root references it.
			d.Omitted = slices.DeleteFunc(d.Omitted, func(o ocispec.Descriptor) bool { return o.MediaType == ocispec.MediaTypeImageManifest })
		}},
		{"resized", func(d *artifact.DeltaInfo) {
			for i := range d.Omitted {
				d.Omitted[i].Size++
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edited := slices.Clone(entries)
			for i, e := range edited {
				if e.Header.Name != "ferry-delta.json" {
					continue
				}
				var info artifact.DeltaInfo
				if err := json.Unmarshal(e.Data, &info); err != nil {
					t.Fatal(err)
				}
				tc.edit(&info)
				nb, _ := json.Marshal(info)
				h := *e.Header
				h.Size = int64(len(nb))
				edited[i] = tarEntry{&h, nb}
			}
			p := filepath.Join(t.TempDir(), "bad.tar")
			writeTar(t, p, edited)
			r, err := artifact.Open(ctx, p)
			if err == nil {
				_, err = artifact.Inspect(ctx, r, "", nil)
			}
			if !errors.Is(err, artifact.ErrCorrupt) {
				t.Fatalf("inspect: %v", err)
			}
		})
	}
}
