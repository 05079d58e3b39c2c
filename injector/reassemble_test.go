package injector

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReassemble(t *testing.T) {
	img := newTestImage(t, 1, 3000, 70000)
	payload := tarOf(t, img.files)
	goodDigest := digestOf(payload)

	tests := []struct {
		name    string
		mutate  func(t *testing.T, chunks string, count int) (int, string) // returns count and digest to pass
		wantErr string
	}{
		{"ok", func(t *testing.T, chunks string, count int) (int, string) { return count, goodDigest }, ""},
		{"bare hex digest", func(t *testing.T, chunks string, count int) (int, string) {
			return count, strings.TrimPrefix(goodDigest, "sha256:")
		}, ""},
		{"changed byte", func(t *testing.T, chunks string, count int) (int, string) {
			p := filepath.Join(chunks, ChunkName(DefaultChunkPrefix, count/2))
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			writeThrough(t, p, b)
			return count, goodDigest
		}, "payload digest mismatch"},
		{"missing chunk", func(t *testing.T, chunks string, count int) (int, string) {
			os.Remove(filepath.Join(chunks, ChunkName(DefaultChunkPrefix, 1)))
			return count, goodDigest
		}, "missing chunk " + filepath.Join("CHUNKS", "payload-00001")},
		{"dangling chunk link", func(t *testing.T, chunks string, count int) (int, string) {
			os.Remove(filepath.Join(chunks, "..data", ChunkName(DefaultChunkPrefix, 2)))
			return count, goodDigest
		}, "chunk " + filepath.Join("CHUNKS", "payload-00002")},
		{"extra chunk", func(t *testing.T, chunks string, count int) (int, string) {
			os.WriteFile(filepath.Join(chunks, ChunkName(DefaultChunkPrefix, count)), []byte("x"), 0o644)
			return count, goodDigest
		}, "unexpected chunk"},
		{"count too small", func(t *testing.T, chunks string, count int) (int, string) { return count - 1, goodDigest }, "unexpected chunk"},
		{"count zero", func(t *testing.T, chunks string, count int) (int, string) { return 0, goodDigest }, "chunk count must be positive"},
		{"bad digest", func(t *testing.T, chunks string, count int) (int, string) { return count, "sha256:xyz" }, "invalid sha256 digest"},
		{"wrong digest", func(t *testing.T, chunks string, count int) (int, string) { return count, digestOf([]byte("other")) }, "payload digest mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			chunks := filepath.Join(dir, "chunks")
			os.Mkdir(chunks, 0o755)
			count := writeChunks(t, chunks, payload, 8192)
			// Entries the kubelet or other volumes put beside the chunks are ignored.
			os.WriteFile(filepath.Join(chunks, "stage1-00000"), []byte("other"), 0o644)
			n, dgst := tt.mutate(t, chunks, count)
			out := filepath.Join(dir, "out")
			res, err := Reassemble(context.Background(), ReassembleOptions{Dir: chunks, Count: n, Digest: dgst, Out: out})
			if tt.wantErr != "" {
				want := strings.ReplaceAll(tt.wantErr, "CHUNKS", chunks)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("err = %v, want %q", err, want)
				}
				assertNothingExtracted(t, dir)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Size != int64(len(payload)) || res.Files != len(img.files) {
				t.Errorf("result %+v, want %d bytes, %d files", res, len(payload), len(img.files))
			}
			for name, b := range img.files {
				got, err := os.ReadFile(filepath.Join(out, name))
				if err != nil || !bytes.Equal(got, b) {
					t.Errorf("%s: extracted content differs (%v)", name, err)
				}
			}
		})
	}
}

// writeThrough replaces the content behind a chunk symlink.
func writeThrough(t *testing.T, p string, b []byte) {
	t.Helper()
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(real, 0o644)
	if err := os.WriteFile(real, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func assertNothingExtracted(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "chunks" {
			t.Errorf("left behind %s after a refusal", e.Name())
		}
	}
}

func TestReassembleRefusesUnsafeTar(t *testing.T) {
	tests := []struct {
		name string
		hdr  tar.Header
		want string
	}{
		{"dotdot", tar.Header{Typeflag: tar.TypeReg, Name: "blobs/../../etc/passwd"}, "path traversal"},
		{"leading dotdot", tar.Header{Typeflag: tar.TypeReg, Name: "../x"}, "path traversal"},
		{"absolute", tar.Header{Typeflag: tar.TypeReg, Name: "/etc/passwd"}, "absolute"},
		{"symlink", tar.Header{Typeflag: tar.TypeSymlink, Name: "link", Linkname: "/etc"}, "only regular files and directories"},
		{"hardlink", tar.Header{Typeflag: tar.TypeLink, Name: "link", Linkname: "index.json"}, "only regular files and directories"},
		{"char device", tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}, "only regular files and directories"},
		{"fifo", tar.Header{Typeflag: tar.TypeFifo, Name: "fifo"}, "only regular files and directories"},
		{"root", tar.Header{Typeflag: tar.TypeDir, Name: "./"}, "extraction root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "oci-layout", Size: 2, Mode: 0o644})
			tw.Write([]byte("{}"))
			hdr := tt.hdr
			hdr.Mode = 0o644
			if err := tw.WriteHeader(&hdr); err != nil {
				t.Fatal(err)
			}
			tw.Close()
			dir := t.TempDir()
			chunks := filepath.Join(dir, "chunks")
			os.Mkdir(chunks, 0o755)
			n := writeChunks(t, chunks, buf.Bytes(), 1000)
			_, err := Reassemble(context.Background(), ReassembleOptions{Dir: chunks, Count: n, Digest: digestOf(buf.Bytes()), Out: filepath.Join(dir, "out")})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			assertNothingExtracted(t, dir)
			if _, err := os.Lstat(filepath.Join(dir, "etc")); err == nil {
				t.Fatal("wrote outside the output directory")
			}
		})
	}
}

// TestReassembleReplacesOut checks a restart (Out already holds a layout)
// re-extracts cleanly.
func TestReassembleReplacesOut(t *testing.T) {
	img := newTestImage(t, 2, 100)
	payload := tarOf(t, img.files)
	dir := t.TempDir()
	chunks := filepath.Join(dir, "chunks")
	os.Mkdir(chunks, 0o755)
	n := writeChunks(t, chunks, payload, 512)
	out := filepath.Join(dir, "out")
	for range 2 {
		if _, err := Reassemble(context.Background(), ReassembleOptions{Dir: chunks, Count: n, Digest: digestOf(payload), Out: out}); err != nil {
			t.Fatal(err)
		}
	}
}
