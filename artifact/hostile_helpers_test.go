package artifact_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// smallPackage creates a package with no images (no registry needed): one
// file of fileSize random bytes and one manifest bundle. It returns the
// archive's path (format by out's extension).
func smallPackage(t testing.TB, out string, fileSize int) *build.CreateResult {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "files", "data.bin"), string(fixture.NewLayer(fixture.Rand(7), fileSize).Data))
	writeFile(t, filepath.Join(dir, "manifests", "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: small\n")
	writeFile(t, filepath.Join(dir, definition.FileName), `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: small, version: 1.0.0}
platforms: [linux/amd64]
components:
  - name: main
    manifests: [{name: cm, files: [manifests/cm.yaml]}]
    files: [{source: files/data.bin, target: /data.bin}]
`)
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// zstdFrame writes zstd frames by hand (RFC 8878): raw blocks for given
// bytes and RLE blocks for runs, so that tests can build archives that
// expand to gigabytes from a few hundred kilobytes, or that declare any
// window, without compressing anything.
type zstdFrame struct {
	buf     bytes.Buffer
	pending []byte // raw bytes not yet written as blocks
}

// newZstdFrame starts a frame declaring a window of 1<<windowLog bytes, with
// no content size and no checksum.
func newZstdFrame(windowLog int) *zstdFrame {
	z := &zstdFrame{}
	z.buf.Write([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte((windowLog - 10) << 3)})
	return z
}

func (z *zstdFrame) block(typ, size int, last bool, body []byte) {
	h := uint32(size)<<3 | uint32(typ)<<1
	if last {
		h |= 1
	}
	z.buf.Write([]byte{byte(h), byte(h >> 8), byte(h >> 16)})
	z.buf.Write(body)
}

// raw adds bytes, stored as raw blocks.
func (z *zstdFrame) raw(b []byte) { z.pending = append(z.pending, b...) }

func (z *zstdFrame) flush(last bool) {
	for len(z.pending) > 0 {
		n := min(len(z.pending), 128<<10)
		z.block(0, n, last && n == len(z.pending), z.pending[:n])
		z.pending = z.pending[n:]
	}
}

// run adds n copies of byte c as RLE blocks of 128 KiB.
func (z *zstdFrame) run(c byte, n int64) {
	z.flush(false)
	for n > 0 {
		k := min(n, 128<<10)
		z.block(1, int(k), false, []byte{c})
		n -= k
	}
}

// end closes the frame with an empty last block and returns its bytes.
func (z *zstdFrame) end() []byte {
	z.flush(false)
	z.block(0, 0, true, nil)
	return z.buf.Bytes()
}

// tarHeader is the 512-byte header of a regular file entry (ustar, or PAX
// for sizes ustar cannot hold).
func tarHeader(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes() // no Flush: only the header blocks
}

// tarPadding is the zero padding after an entry of size bytes.
func tarPadding(size int64) int64 { return (512 - size%512) % 512 }

// headEntries returns the head entries of an archive (ferry.json,
// oci-layout, index.json and the blob folders) as tar bytes, with
// ferry.json replaced when cfg is not nil.
func headEntries(t testing.TB, entries []tarEntry, cfg *artifact.Config) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if strings.HasPrefix(e.Header.Name, "blobs/sha256/") && e.Header.Typeflag == tar.TypeReg {
			break
		}
		data := e.Data
		if e.Header.Name == artifact.ConfigFileName && cfg != nil {
			var err error
			if data, err = json.Marshal(cfg); err != nil {
				t.Fatal(err)
			}
		}
		h := *e.Header
		h.Size = int64(len(data))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Flush()
	return buf.Bytes()
}

// liarConfig is ferry.json of entries claiming an image of claim bytes, so
// that the size budget it grants lets anything through: only the graph
// check at the end could tell, and the other limits must hold until then.
func liarConfig(t testing.TB, entries []tarEntry, claim int64) *artifact.Config {
	t.Helper()
	var cfg artifact.Config
	for _, e := range entries {
		if e.Header.Name == artifact.ConfigFileName {
			if err := json.Unmarshal(e.Data, &cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg.Components[0].Images = append(cfg.Components[0].Images, artifact.Image{
		Ref: "docker.io/library/big:1", Digest: digest.FromString("big"), OriginalDigest: digest.FromString("big"),
		MediaType: "application/vnd.oci.image.manifest.v1+json", Platforms: []string{"linux/amd64"}, Size: claim,
	})
	return &cfg
}

// zeroBomb is a .tar.zst of a real package's head followed by one blob
// entry of size zero bytes, as RLE blocks: size/32768 bytes of archive (and
// before it, if ballast > 0, a random blob of about that size).
func zeroBomb(t testing.TB, entries []tarEntry, cfg *artifact.Config, size int64, ballast int) []byte {
	t.Helper()
	z := newZstdFrame(17)
	z.raw(headEntries(t, entries, cfg))
	if ballast > 0 {
		// An incompressible blob first, so that the archive is large enough
		// for ferry.json's claim.
		b := fixture.NewLayer(fixture.Rand(5), ballast).Data
		z.raw(tarHeader(t, "blobs/sha256/"+digest.FromBytes(b).Encoded(), int64(len(b))))
		z.raw(b)
		z.raw(make([]byte, tarPadding(int64(len(b)))))
	}
	z.raw(tarHeader(t, "blobs/sha256/"+strings.Repeat("0", 64), size))
	z.run(0, size+tarPadding(size))
	return z.end()
}

// jsonFlood is a .tar.zst of a real package's head followed by n distinct
// blobs of size bytes each that the graph check would hold (a JSON object
// with "layers"), each named by its true digest. The objects are padded
// with spaces (the archive stays tiny) or, with random set, with random
// letters (the archive is as large as its content).
func jsonFlood(t testing.TB, entries []tarEntry, cfg *artifact.Config, n int, size int64, random bool) []byte {
	t.Helper()
	z := newZstdFrame(17)
	z.raw(headEntries(t, entries, cfg))
	rng := fixture.Rand(11)
	for i := range n {
		head := fmt.Appendf(nil, `{"layers":[],"n":%d,"pad":"`, i)
		pad := size - int64(len(head)) - 2
		filler := bytes.Repeat([]byte{' '}, int(pad))
		if random {
			for j := range filler {
				filler[j] = 'a' + byte(rng.IntN(26))
			}
		}
		blob := append(append(head, filler...), '"', '}')
		z.raw(tarHeader(t, "blobs/sha256/"+digest.FromBytes(blob).Encoded(), size))
		if random {
			z.raw(blob)
		} else {
			z.raw(head)
			z.run(' ', pad)
			z.raw([]byte(`"}`))
		}
		z.run(0, tarPadding(size))
	}
	return z.end()
}

// windowArchive stores a real archive's tar bytes in one zstd frame that
// declares a window of 1<<windowLog bytes.
func windowArchive(t testing.TB, tarPath string, windowLog int) []byte {
	t.Helper()
	data, err := os.ReadFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	z := newZstdFrame(windowLog)
	z.raw(data)
	return z.end()
}

// manyBlobs is a .tar.zst of a real package's head followed by n tiny
// distinct blobs.
func manyBlobs(t testing.TB, entries []tarEntry, n int) []byte {
	t.Helper()
	z := newZstdFrame(17)
	z.raw(headEntries(t, entries, nil))
	for i := range n {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(i))
		z.raw(tarHeader(t, "blobs/sha256/"+digest.FromBytes(b[:]).Encoded(), 4))
		z.raw(b[:])
		z.raw(make([]byte, tarPadding(4)))
	}
	return z.end()
}

// storage is what a registry's filesystem storage holds.
type storage struct {
	blobs   map[digest.Digest]bool
	tags    map[string]digest.Digest // repository:tag → digest
	uploads []string                 // open upload sessions
}

// readStorage lists what the registry storage under root holds.
func readStorage(t testing.TB, root string) storage {
	t.Helper()
	s := storage{blobs: map[digest.Digest]bool{}, tags: map[string]digest.Digest{}}
	base := filepath.Join(root, "docker", "registry", "v2")
	filepath.WalkDir(filepath.Join(base, "blobs", "sha256"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "data" {
			s.blobs[digest.NewDigestFromEncoded(digest.SHA256, filepath.Base(filepath.Dir(p)))] = true
		}
		return nil
	})
	repos := filepath.Join(base, "repositories")
	filepath.WalkDir(repos, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(repos, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		for i, part := range parts {
			switch {
			case part == "_uploads" && i+3 == len(parts) && (d.Name() == "data" || d.Name() == "startedat"):
				// A session is its data and start time. distribution's DELETE
				// of a session leaves an empty hash state behind (its
				// dispatcher closes the cancelled writer, which saves it).
				s.uploads = append(s.uploads, filepath.Dir(rel))
			case part == "_manifests" && i+5 == len(parts) && parts[i+1] == "tags" && parts[i+3] == "current" && d.Name() == "link":
				b, _ := os.ReadFile(p)
				s.tags[strings.Join(parts[:i], "/")+":"+parts[i+2]] = digest.Digest(strings.TrimSpace(string(b)))
			}
		}
		return nil
	})
	return s
}

// helmPackage packages the chart folder src into dest with the Helm SDK,
// as `helm package` does, and returns the .tgz path.
func helmPackage(t testing.TB, src, dest string) string {
	t.Helper()
	ch, err := loader.LoadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	p, err := chartutil.Save(ch, dest)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// chartDependencies lists the sorted names of a chart archive's subcharts,
// as Helm loads them.
func chartDependencies(t testing.TB, tgz []byte) []string {
	t.Helper()
	ch, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		t.Fatalf("helm cannot load the stored chart: %v", err)
	}
	var names []string
	for _, d := range ch.Dependencies() {
		names = append(names, d.Name())
	}
	sort.Strings(names)
	return names
}

// largestBlob names the largest blob entry.
func largestBlob(entries []tarEntry) string {
	var name string
	var size int
	for _, e := range entries {
		if strings.HasPrefix(e.Header.Name, "blobs/sha256/") && len(e.Data) > size {
			name, size = e.Header.Name, len(e.Data)
		}
	}
	return name
}

// signedPackage creates the world's package as name in a temporary folder
// and signs it with a fresh key, alice; it returns the archive's path and
// alice's keys (written beside it as alice.key and alice.pub).
func signedPackage(t testing.TB, w *world, name string) (string, *key.Private, *artifact.PublicKey) {
	t.Helper()
	dir := t.TempDir()
	alice, alicePub := keyPair(t, dir, "alice")
	path := filepath.Join(dir, name)
	create(t, w, path)
	if _, err := artifact.Sign(context.Background(), openPkg(t, path), "", alice, artifact.SignOptions{}); err != nil {
		t.Fatal(err)
	}
	return path, alice, alicePub
}
