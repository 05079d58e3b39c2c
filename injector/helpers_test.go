package injector

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// testImage is a random single-platform image as an OCI layout in memory.
type testImage struct {
	files          map[string][]byte // layout path → content
	manifestDigest string
	manifest       []byte
	layers         []string // layer digests
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func newTestImage(t testing.TB, seed uint64, layerSizes ...int) *testImage {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	img := &testImage{files: map[string][]byte{}}
	put := func(b []byte) string {
		d := digestOf(b)
		img.files["blobs/sha256/"+d[len("sha256:"):]] = b
		return d
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	var layers []desc
	for _, n := range layerSizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		d := put(b)
		img.layers = append(img.layers, d)
		layers = append(layers, desc{"application/vnd.oci.image.layer.v1.tar", d, n, nil})
	}
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	cd := put(cfg)
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc{"application/vnd.oci.image.config.v1+json", cd, len(cfg), nil},
		"layers":        layers,
	})
	img.manifest = man
	img.manifestDigest = put(man)
	idx, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []desc{{"application/vnd.oci.image.manifest.v1+json", img.manifestDigest, len(man),
			map[string]string{"org.opencontainers.image.ref.name": "1.0.0"}}},
	})
	img.files["index.json"] = idx
	img.files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	return img
}

// writeDir writes the layout to dir.
func (img *testImage) writeDir(t testing.TB, dir string) {
	t.Helper()
	for name, b := range img.files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tarOf returns a tar of the files (sorted) with directory entries.
func tarOf(t testing.TB, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeChunks splits payload into chunks of size n, mounted in dir as the
// kubelet mounts a ConfigMap: dir/..data → ..2026_timestamp/, dir/key →
// ..data/key.
func writeChunks(t testing.TB, dir string, payload []byte, n int) int {
	t.Helper()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	count := 0
	for off := 0; off < len(payload) || count == 0; off += n {
		name := ChunkName(DefaultChunkPrefix, count)
		if err := os.WriteFile(filepath.Join(ts, name), payload[off:min(off+n, len(payload))], 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		count++
	}
	return count
}
