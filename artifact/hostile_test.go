package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestOnlyTheSignedRootTravels: index.json may name the package root and
// its signature, nothing else. An archive or layout folder with another
// entry — an unrelated image tagged like the package's version (which push
// used to tag over the root), an untagged one, a second signature entry, a
// second root — is refused on open, so verify, push, load and deploy refuse
// it before reading a blob. An archive swapped after it was opened is
// refused by the next walk.
func TestOnlyTheSignedRootTravels(t *testing.T) {
	ctx := context.Background()
	signed, _, alicePub := signedPackage(t, newWorld(t), "signed.tar")
	a := loadArchive(t, signed)
	sig := a.index.Manifests[1]

	// An unrelated image: config, layer, manifest.
	layer := fixture.NewLayer(fixture.Rand(9), 4096).Data
	config := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	manifest, _ := json.Marshal(ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))},
		Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(layer), Size: int64(len(layer))}},
	})
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(manifest), Size: int64(len(manifest))}
	otherRoot := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`)
	withEntries := func(blobs [][]byte, extra ...ocispec.Descriptor) string {
		return a.write(t, func(es []tarEntry) []tarEntry {
			for _, b := range blobs {
				h := *es[len(es)-1].Header
				h.Name = "blobs/sha256/" + digest.FromBytes(b).Encoded()
				es = append(es, tarEntry{&h, b})
			}
			idx := a.index
			idx.Manifests = append(append([]ocispec.Descriptor(nil), a.index.Manifests...), extra...)
			setFile(t, es, "index.json", idx)
			return es
		})
	}
	image := [][]byte{layer, config, manifest}
	tagged := md
	tagged.Annotations = map[string]string{ocispec.AnnotationRefName: "1.0.0"}
	asSignature := md
	asSignature.Annotations = sig.Annotations
	secondRoot := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, ArtifactType: artifact.ArtifactTypePackage,
		Digest: digest.FromBytes(otherRoot), Size: int64(len(otherRoot))}
	cases := []struct{ name, path, want string }{
		{"image tagged as the version", withEntries(image, tagged), `entry 3 (` + md.Digest.String() + `, tagged "1.0.0") is neither the package root`},
		{"untagged image", withEntries(image, md), "entry 3 (" + md.Digest.String() + ") is neither the package root"},
		{"a second signature entry", withEntries(image, asSignature), "entry 3 (" + md.Digest.String()},
		{"the same signature twice", withEntries(nil, sig), "entry 3 (" + sig.Digest.String()},
		{"a second root", withEntries([][]byte{otherRoot}, secondRoot), "index.json names 2 package roots"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, src := range []string{c.path, extractLayout(t, c.path)} {
				_, err := verifyFile(src, alicePub)
				if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("%s: error %v, want ErrCorrupt containing %q on one line", src, err, c.want)
				}
			}
		})
	}

	// Opened while good, swapped before the push: nothing goes up.
	t.Run("swapped after open", func(t *testing.T) {
		root := t.TempDir()
		host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))
		p := filepath.Join(t.TempDir(), "pkg.tar")
		data, _ := os.ReadFile(signed)
		os.WriteFile(p, data, 0o644)
		r := openPkg(t, p)
		if _, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{alicePub}}); err != nil {
			t.Fatal(err)
		}
		bad, _ := os.ReadFile(cases[0].path)
		os.WriteFile(p, bad, 0o644)
		_, err := artifact.Push(ctx, r, host+"/pkgs/demo:1.0.0", artifact.PushOptions{})
		if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "changed since it was opened") {
			t.Fatalf("push of a swapped archive: %v", err)
		}
		if s := readStorage(t, root); len(s.blobs) > 0 || len(s.tags) > 0 {
			t.Fatalf("a refused push stored %d blobs and tags %v", len(s.blobs), s.tags)
		}
	})

	// The same rule for a registry reference: the signature tag must hold
	// a cosign signature manifest and nothing else.
	t.Run("registry reference", func(t *testing.T) {
		host := registrytest.New(t)
		ref := host + "/pkgs/demo:1.0.0"
		if _, err := pushFile(t, signed, ref, artifact.PushOptions{}); err != nil {
			t.Fatal(err)
		}
		repo := remoteRepo(t, ref)
		sm := a.manifest(t, sig.Digest)
		sm.Layers = append(sm.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(layer), Size: int64(len(layer))})
		if err := repo.Blobs().Push(ctx, sm.Layers[len(sm.Layers)-1], bytes.NewReader(layer)); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(sm)
		nd := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if err := repo.PushReference(ctx, nd, bytes.NewReader(data), artifact.SignatureTag(a.root)); err != nil {
			t.Fatal(err)
		}
		want := "is a \"" + ocispec.MediaTypeImageLayerGzip + "\", not a cosign signature payload"
		if _, err := verifyRemote(ctx, ref, artifact.VerifyOptions{Keys: []artifact.Verifier{alicePub}}); !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Fatalf("verify: %v", err)
		}
		out := filepath.Join(t.TempDir(), "pulled.tar")
		if _, err := pullRemote(ctx, ref, out, artifact.PullOptions{}); !errors.Is(err, artifact.ErrCorrupt) {
			t.Fatalf("pull: %v", err)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused pull wrote %s", out)
		}
	})
}

// TestSignatureManifestShape: a signature manifest holds cosign signature
// payloads over the root and nothing else, within the limits.
func TestSignatureManifestShape(t *testing.T) {
	signed, _, alicePub := signedPackage(t, newWorld(t), "signed.tar")
	a := loadArchive(t, signed)
	sm := a.manifest(t, a.index.Manifests[1].Digest)
	payload := a.blob(t, sm.Layers[0].Digest)
	big := append(bytes.TrimSuffix(payload, []byte("}")), []byte(`,"pad":"`+strings.Repeat("x", artifact.MaxSignaturePayload)+`"}`)...)
	// A signature manifest with extra layers, each stored in the archive.
	withLayers := func(layers ...[]byte) string {
		return rewriteSignatureWith(t, a, layers, func(m *ocispec.Manifest) {
			for _, l := range layers {
				m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: artifact.MediaTypeSimpleSigning, Digest: digest.FromBytes(l), Size: int64(len(l)),
					Annotations: m.Layers[0].Annotations})
			}
		})
	}
	many := make([][]byte, artifact.MaxSignatures)
	for i := range many {
		many[i] = bytes.Replace(payload, []byte(`"optional":{`), fmt.Appendf(nil, `"optional":{"n":"%d",`, i), 1)
	}
	cases := []struct {
		name, path string
		is         error
		want       string
	}{
		{"payload too large", withLayers(big), artifact.ErrCorrupt, fmt.Sprintf("more than %d", artifact.MaxSignaturePayload)},
		{"too many signatures", withLayers(many...), artifact.ErrCorrupt, fmt.Sprintf("holds %d signatures, more than %d", artifact.MaxSignatures+1, artifact.MaxSignatures)},
		{"not a payload", withLayers([]byte(`{"critical":{"type":"something else"}}`)), artifact.ErrCorrupt, "signature 2 (sha256:"},
		{"a layer of another type", rewriteSignatureWith(t, a, nil, func(m *ocispec.Manifest) { m.Layers[0].MediaType = ocispec.MediaTypeImageLayerGzip }),
			artifact.ErrCorrupt, "not a cosign signature payload"},
		{"no signature", rewriteSignatureWith(t, a, nil, func(m *ocispec.Manifest) { m.Layers = []ocispec.Descriptor{} }), artifact.ErrCorrupt, "holds no signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := verifyFile(c.path, alicePub)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want %v containing %q", err, c.is, c.want)
			}
		})
	}
}

// rewriteSignatureWith is rewriteSignature that also stores extra blobs
// and drops blobs no longer referenced.
func rewriteSignatureWith(t testing.TB, a *pkgArchive, blobs [][]byte, edit func(*ocispec.Manifest)) string {
	t.Helper()
	p := rewriteSignature(t, a, edit)
	b := loadArchive(t, p)
	m := b.manifest(t, b.index.Manifests[1].Digest)
	keep := map[string]bool{}
	for _, l := range m.Layers {
		keep["blobs/sha256/"+l.Digest.Encoded()] = true
	}
	old := a.manifest(t, a.index.Manifests[1].Digest)
	return b.write(t, func(es []tarEntry) []tarEntry {
		var out []tarEntry
		for _, e := range es {
			drop := false
			for _, l := range old.Layers {
				if e.Header.Name == "blobs/sha256/"+l.Digest.Encoded() && !keep[e.Header.Name] {
					drop = true
				}
			}
			if !drop {
				out = append(out, e)
			}
		}
		for _, blob := range blobs {
			h := *es[len(es)-1].Header
			h.Name = "blobs/sha256/" + digest.FromBytes(blob).Encoded()
			out = append(out, tarEntry{&h, blob})
		}
		return out
	})
}

// TestLayoutFolderFiles: a layout folder's files must be regular files
// within the limits, as an archive's entries must: links (to /dev/zero, to
// a blob), FIFOs, folders where files belong and oversized heads are
// refused at once, with a one-line error naming the file.
func TestLayoutFolderFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "small.tar")
	res := smallPackage(t, out, 4096)
	entries := readTar(t, out)
	blob := largestBlob(entries)
	cases := []struct {
		name  string
		setup func(dir string) error
		is    error
		want  string
	}{
		{"index.json a link to /dev/zero", func(dir string) error {
			return replaceWith(dir, "index.json", func(p string) error { return os.Symlink("/dev/zero", p) })
		},
			artifact.ErrUnsafeEntry, `"index.json" is a link`},
		{"oci-layout a link to a file", func(dir string) error {
			return replaceWith(dir, "oci-layout", func(p string) error {
				os.WriteFile(p+".real", []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
				return os.Symlink(p+".real", p)
			})
		}, artifact.ErrUnsafeEntry, `"oci-layout" is a link`},
		{"ferry.json a FIFO", func(dir string) error {
			return replaceWith(dir, "ferry.json", func(p string) error { return syscall.Mkfifo(p, 0o644) })
		},
			artifact.ErrUnsafeEntry, `"ferry.json" is not a regular file`},
		{"index.json a folder", func(dir string) error {
			return replaceWith(dir, "index.json", func(p string) error { return os.Mkdir(p, 0o755) })
		},
			artifact.ErrUnsafeEntry, `"index.json" is not a regular file`},
		{"oci-layout oversized", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "oci-layout"), bytes.Repeat([]byte(" "), artifact.MaxManifestSize+1), 0o644)
		}, artifact.ErrCorrupt, fmt.Sprintf("oci-layout is %d bytes, more than the %d", artifact.MaxManifestSize+1, artifact.MaxManifestSize)},
		{"a blob a link", func(dir string) error {
			return replaceWith(dir, blob, func(p string) error {
				data, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "copy"))
				os.WriteFile(p+".real", data, 0o644)
				return os.Symlink(p+".real", p)
			})
		}, artifact.ErrUnsafeEntry, `"` + blob + `" is a link`},
		{"a blob a FIFO", func(dir string) error {
			return replaceWith(dir, blob, func(p string) error { return syscall.Mkfifo(p, 0o644) })
		},
			artifact.ErrUnsafeEntry, `"` + blob + `" is not a regular file`},
		{"blobs/sha256 a link", func(dir string) error {
			p := filepath.Join(dir, "blobs", "sha256")
			if err := os.Rename(p, p+".real"); err != nil {
				return err
			}
			return os.Symlink(p+".real", p)
		}, artifact.ErrUnsafeEntry, `"blobs/sha256" is not a folder`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := extractLayout(t, out)
			data, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(blob)))
			os.WriteFile(filepath.Join(filepath.Dir(dir), "copy"), data, 0o644)
			if err := c.setup(dir); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- inspectErr(dir) }()
			select {
			case err := <-done:
				if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want %v containing %q on one line", err, c.is, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("inspect hangs")
			}
		})
	}
	if err := inspectErr(extractLayout(t, out)); err != nil {
		t.Fatalf("the untouched layout (%s): %v", res.Root.Digest, err)
	}
}

// replaceWith removes dir/name and makes it anew with mk.
func replaceWith(dir, name string, mk func(p string) error) error {
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.Remove(p); err != nil {
		return err
	}
	return mk(p)
}

// TestFailedPushCancelsUploads: a push refused half-way — a large blob
// damaged, found only at its end — deletes the upload session it opened,
// so nothing of it stays in the registry's upload area.
func TestFailedPushCancelsUploads(t *testing.T) {
	out := filepath.Join(t.TempDir(), "big.tar")
	smallPackage(t, out, 6<<20)
	damaged := filepath.Join(t.TempDir(), "damaged.tar")
	entries := readTar(t, out)
	name := largestBlob(entries)
	for i, e := range entries {
		if e.Header.Name == name {
			entries[i].Data = append([]byte(nil), e.Data...)
			entries[i].Data[len(e.Data)-1] ^= 1
		}
	}
	writeTar(t, damaged, entries)
	root := t.TempDir()
	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))
	_, err := pushFile(t, damaged, host+"/pkgs/small:1.0.0", artifact.PushOptions{})
	if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), strings.TrimPrefix(name, "blobs/sha256/")) {
		t.Fatalf("push of a damaged blob: %v", err)
	}
	s := readStorage(t, root)
	if len(s.uploads) > 0 {
		t.Fatalf("the failed push left upload sessions: %v", s.uploads)
	}
	if len(s.tags) > 0 {
		t.Fatalf("the failed push tagged %v", s.tags)
	}
	if s.blobs[digest.NewDigestFromEncoded(digest.SHA256, strings.TrimPrefix(name, "blobs/sha256/"))] {
		t.Fatal("the damaged blob was stored")
	}
}

// TestStaleTemporariesRemoved: a create or pull killed with SIGKILL leaves
// its temporary file; the next write of the same target removes it, and
// leaves a live writer's alone.
func TestStaleTemporariesRemoved(t *testing.T) {
	if os.Getenv("FERRY_TEST_KILLED_CREATE") != "" {
		// The child: create slowly enough to be killed while writing.
		smallPackage(t, os.Getenv("FERRY_TEST_KILLED_CREATE"), 512<<20)
		return
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "small.tar.zst")
	var stale []string
	for attempt := 0; attempt < 5 && len(stale) == 0; attempt++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStaleTemporariesRemoved$")
		// The child's own temporaries (its 512 MiB source) go where this
		// test removes them: killed, it cannot.
		cmd.Env = append(os.Environ(), "FERRY_TEST_KILLED_CREATE="+out, "TMPDIR="+t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if stale, _ = filepath.Glob(filepath.Join(dir, ".small.tar.zst.tmp-*")); len(stale) > 0 {
				time.Sleep(50 * time.Millisecond) // a little into the write
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		stale, _ = filepath.Glob(filepath.Join(dir, ".small.tar.zst.tmp-*"))
	}
	if len(stale) == 0 {
		t.Fatal("the killed create left no temporary file to clean")
	}
	// A writer still at work: its file is locked.
	live, err := os.Create(filepath.Join(dir, ".small.tar.zst.tmp-live"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	smallPackage(t, out, 4096)
	left, _ := filepath.Glob(filepath.Join(dir, ".small.tar.zst.tmp-*"))
	if len(left) != 1 || filepath.Base(left[0]) != ".small.tar.zst.tmp-live" {
		t.Fatalf("after a new create: temporaries %v, want only the live writer's", left)
	}
	if err := inspectErr(out); err != nil {
		t.Fatal(err)
	}
}

// TestChartSubchartsReproducible: a chart with subcharts — folders and a
// .tgz under charts/ — gives the same bytes every time: Helm's loader
// orders subcharts by map iteration.
func TestChartSubchartsReproducible(t *testing.T) {
	dir := t.TempDir()
	app, err := fixture.Chart(filepath.Join(dir, "charts"), "app", "0.1.0", "docker.io/library/web:1.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"alpha", "beta", "gamma"} {
		if _, err := fixture.Chart(filepath.Join(app, "charts"), sub, "0.2.0", "docker.io/library/"+sub+":1"); err != nil {
			t.Fatal(err)
		}
	}
	// A packaged dependency, as `helm dependency build` leaves it.
	tgzDir := t.TempDir()
	src, _ := fixture.Chart(tgzDir, "delta", "0.3.0", "docker.io/library/delta:1")
	tgz := helmPackage(t, src, filepath.Join(app, "charts"))
	if !strings.HasSuffix(tgz, "delta-0.3.0.tgz") {
		t.Fatalf("packaged %s", tgz)
	}
	writeFile(t, filepath.Join(dir, definition.FileName), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: subcharts, version: 1.0.0}
platforms: [linux/amd64]
components:
  - name: main
    charts: [{path: charts/app}]
`)
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var first digest.Digest
	var firstBytes []byte
	for i := range 6 {
		out := filepath.Join(t.TempDir(), "p.tar")
		res, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(out)
		if i == 0 {
			first, firstBytes = res.Root.Digest, data
			a := loadArchive(t, out)
			m := a.manifest(t, a.kind(t, artifact.KindChart).Digest)
			if deps := chartDependencies(t, a.blob(t, m.Layers[0].Digest)); strings.Join(deps, ",") != "alpha,beta,delta,gamma" {
				t.Fatalf("the stored chart's subcharts: %v", deps)
			}
			continue
		}
		if res.Root.Digest != first || !bytes.Equal(data, firstBytes) {
			t.Fatalf("create %d: root %s, first %s (bytes equal: %v)", i+1, res.Root.Digest, first, bytes.Equal(data, firstBytes))
		}
	}
}

// TestArchivePathMustBeARegularFile: an archive path that is a FIFO or a
// device is refused at once (a FIFO used to hang the reader).
func TestArchivePathMustBeARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pkg.tar.zst")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := artifact.Open(context.Background(), p); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, artifact.ErrUnsafeEntry) || !strings.Contains(err.Error(), "is not a regular file") {
				t.Fatalf("%s: %v", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: open hangs", p)
		}
	}
}

// TestPushOneFrameArchive: a .tar.zst recompressed as one zstd frame (zstd
// or tar --zstd made it) pushes whole, by two streams (each decompresses
// all of it), and pulls back verified.
func TestPushOneFrameArchive(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "small.tar")
	smallPackage(t, plain, 6<<20)
	data, _ := os.ReadFile(plain)
	var one bytes.Buffer
	enc, _ := zstd.NewWriter(&one)
	enc.Write(data)
	enc.Close()
	p := filepath.Join(dir, "one.tar.zst")
	os.WriteFile(p, one.Bytes(), 0o644)
	host := registrytest.New(t)
	if _, err := pushFile(t, p, host+"/pkgs/small:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pulled.tar")
	if _, err := pullRemote(context.Background(), host+"/pkgs/small:1.0.0", out, artifact.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := inspectErr(out); err != nil {
		t.Fatal(err)
	}
}
