package artifact_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
)

// inspectErr opens and inspects path, returning the error.
func inspectErr(path string) error {
	r, err := artifact.Open(context.Background(), path)
	if err != nil {
		return err
	}
	_, err = artifact.Inspect(context.Background(), r, "", nil)
	return err
}

func TestReaderRejects(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tar")
	create(t, w, good)
	goodZst := filepath.Join(dir, "good.tar.zst")
	create(t, w, goodZst)
	if err := inspectErr(good); err != nil {
		t.Fatalf("untouched package: %v", err)
	}
	entries := readTar(t, good)
	blobIdx := func(pred func(tarEntry) bool) int {
		for i, e := range entries {
			if strings.HasPrefix(e.Header.Name, "blobs/sha256/") && e.Header.Typeflag == tar.TypeReg && pred(e) {
				return i
			}
		}
		t.Fatal("no such blob")
		return -1
	}
	mutate := func(f func([]tarEntry) []tarEntry) string {
		cp := make([]tarEntry, len(entries))
		for i, e := range entries {
			h := *e.Header
			cp[i] = tarEntry{&h, append([]byte(nil), e.Data...)}
		}
		p := filepath.Join(t.TempDir(), "bad.tar")
		writeTar(t, p, f(cp))
		return p
	}
	cut := func(src string, frac float64) string {
		data, _ := os.ReadFile(src)
		p := filepath.Join(t.TempDir(), filepath.Base(src))
		os.WriteFile(p, data[:int(float64(len(data))*frac)], 0o644)
		return p
	}
	victim := blobIdx(func(e tarEntry) bool { return e.Header.Size > 1000 })
	victimDigest := "sha256:" + strings.TrimPrefix(entries[victim].Header.Name, "blobs/sha256/")

	tests := []struct {
		name string
		path string
		want string
		is   error
	}{
		{"truncated tar", cut(good, 0.6), "archive is truncated", artifact.ErrCorrupt},
		{"truncated zst", cut(goodZst, 0.6), "", artifact.ErrCorrupt},
		{"empty file", cut(good, 0), "empty archive", artifact.ErrNotPackage},
		{"path traversal", mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{&tar.Header{Name: "blobs/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("x")})
		}), `"blobs/../../evil" contains ..`, artifact.ErrUnsafeEntry},
		{"absolute path", mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{&tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("x")})
		}), `"/etc/evil" is an absolute`, artifact.ErrUnsafeEntry},
		{"symlink", mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{&tar.Header{Name: "blobs/sha256/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, nil})
		}), `"blobs/sha256/link" is a link`, artifact.ErrUnsafeEntry},
		{"hard link", mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{&tar.Header{Name: "blobs/sha256/hl", Typeflag: tar.TypeLink, Linkname: "ferry.json"}, nil})
		}), "is a link", artifact.ErrUnsafeEntry},
		{"device", mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{&tar.Header{Name: "blobs/sha256/dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, nil})
		}), "is a device", artifact.ErrUnsafeEntry},
		{"duplicate entry", mutate(func(es []tarEntry) []tarEntry { return append(es, es[victim]) }), "duplicate entry", artifact.ErrCorrupt},
		{"missing blob", mutate(func(es []tarEntry) []tarEntry { return append(es[:victim:victim], es[victim+1:]...) }),
			"blob " + victimDigest + " missing", artifact.ErrCorrupt},
		{"extra blob", mutate(func(es []tarEntry) []tarEntry {
			d := digest.FromString("junk")
			return append(es, tarEntry{&tar.Header{Name: "blobs/sha256/" + d.Encoded(), Typeflag: tar.TypeReg, Mode: 0o644}, []byte("junk")})
		}), "is not referenced", artifact.ErrCorrupt},
		{"ferry.json differs", mutate(func(es []tarEntry) []tarEntry {
			es[0].Data = []byte(strings.Replace(string(es[0].Data), `"version":"1.0.0"`, `"version":"6.6.6"`, 1))
			return es
		}), "ferry.json differs from the package config blob", artifact.ErrCorrupt},
		{"not a package", mutate(func(es []tarEntry) []tarEntry { return es[1:] }), `first entry is "oci-layout"`, artifact.ErrNotPackage},
		{"stray entry", mutate(func(es []tarEntry) []tarEntry {
			return append(es, tarEntry{&tar.Header{Name: "notes.txt", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("x")})
		}), `unexpected entry "notes.txt"`, artifact.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := inspectErr(tt.path)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want %q on one line", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

// TestReaderFlippedByte flips one byte in every blob in turn: each is caught
// and the error names that blob.
func TestReaderFlippedByte(t *testing.T) {
	w := newWorld(t)
	good := filepath.Join(t.TempDir(), "good.tar")
	create(t, w, good)
	entries := readTar(t, good)
	n := 0
	for i, e := range entries {
		hex, ok := strings.CutPrefix(e.Header.Name, "blobs/sha256/")
		if !ok || hex == "" {
			continue
		}
		n++
		cp := append([]tarEntry(nil), entries...)
		data := append([]byte(nil), e.Data...)
		data[len(data)/2] ^= 0x01
		cp[i] = tarEntry{e.Header, data}
		p := filepath.Join(t.TempDir(), "flipped.tar")
		writeTar(t, p, cp)
		err := inspectErr(p)
		want := "blob sha256:" + hex + " does not match its digest"
		var be *artifact.BlobError
		if !errors.Is(err, artifact.ErrCorrupt) || !errors.As(err, &be) || be.Digest.Encoded() != hex || !strings.Contains(err.Error(), want) {
			t.Errorf("flip in %s: error %v, want ErrCorrupt naming the blob: %q", e.Header.Name, err, want)
		}
	}
	if n < 10 {
		t.Fatalf("only %d blobs checked", n)
	}
}

// TestOpenSkippableFrame: a .tar.zst that opens with a skippable frame (as
// zstd allows, e.g. for metadata some tools prepend) is read as zstd.
func TestOpenSkippableFrame(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "pkg.tar.zst")
	smallPackage(t, pkg, 16<<10)
	data, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	skip := filepath.Join(dir, "skip.tar.zst")
	if err := os.WriteFile(skip, append([]byte{0x5e, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 'm', 'e', 't', 'a'}, data...), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(t.Context(), skip)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Inspect(t.Context(), r, "", nil); err != nil {
		t.Fatalf("inspect: %v", err)
	}
}

// TestRefusalsNameLongStringsInShort: an entry name of nearly 1 MiB (what
// a PAX header holds) or a receipt's media type of 1 MiB is named in a
// refusal of at most 512 bytes, which still says what was refused.
func TestRefusalsNameLongStringsInShort(t *testing.T) {
	w := newWorld(t)
	good := filepath.Join(t.TempDir(), "good.tar")
	create(t, w, good)
	entries := readTar(t, good)
	long := strings.Repeat("a", 1<<20-1<<10)
	archive := func(f func([]tarEntry) []tarEntry) error {
		cp := append([]tarEntry(nil), entries...)
		p := filepath.Join(t.TempDir(), "bad.tar")
		writeTar(t, p, f(cp))
		return inspectErr(p)
	}
	entry := func(name string, typ byte) tarEntry {
		return tarEntry{&tar.Header{Name: name, Typeflag: typ, Mode: 0o644}, []byte("x")}
	}
	receipt := func(mediaType string) error {
		_, err := artifact.ParseReceipt([]byte(`{"mediaType":"` + mediaType + `"}`))
		return err
	}
	for _, tt := range []struct {
		name, want string
		err        error
	}{
		{"first entry", "first entry is", archive(func(es []tarEntry) []tarEntry { return append([]tarEntry{entry(long, tar.TypeReg)}, es...) })},
		{"link", "is a link", archive(func(es []tarEntry) []tarEntry { return append(es, entry("blobs/sha256/"+long, tar.TypeSymlink)) })},
		{"traversal", "contains ..", archive(func(es []tarEntry) []tarEntry { return append(es, entry("blobs/../"+long, tar.TypeReg)) })},
		{"stray entry", "unexpected entry", archive(func(es []tarEntry) []tarEntry { return append(es, entry(long, tar.TypeReg)) })},
		{"blob name", "is not named by a sha256 digest", archive(func(es []tarEntry) []tarEntry { return append(es, entry("blobs/sha256/"+long, tar.TypeReg)) })},
		{"receipt media type", "not a receipt: media type", receipt(long)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("accepted")
			}
			msg := tt.err.Error()
			if len(msg) > 512 || !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("refusal of %d bytes %.200q, want at most 512 naming %q", len(msg), msg, tt.want)
			}
		})
	}
}
