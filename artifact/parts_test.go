package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// splitPackage creates a small package of a 9 MiB file as dir/small<ext>
// and splits it into parts of partMiB MiB.
func splitPackage(t *testing.T, ext string, partMiB int64) (*build.CreateResult, *artifact.Parts) {
	t.Helper()
	res := smallPackage(t, filepath.Join(t.TempDir(), "small"+ext), 9<<20)
	ps, err := artifact.Split(context.Background(), res.Path, artifact.SplitOptions{PartSize: partMiB << 20})
	if err != nil {
		t.Fatal(err)
	}
	return res, ps
}

// TestSplitRoundTrip: a package split into parts of 2 MiB is opened by its
// index, a part or its archive's name, inspected, walked, pushed to a
// registry and pulled back byte for byte, without the parts being joined.
func TestSplitRoundTrip(t *testing.T) {
	ctx := context.Background()
	host := registrytest.New(t)
	for _, ext := range []string{".tar.zst", ".tar"} {
		t.Run(ext, func(t *testing.T) {
			res, ps := splitPackage(t, ext, 2)
			want, err := os.ReadFile(res.Path)
			if err != nil {
				t.Fatal(err)
			}
			n := (int64(len(want)) + 2<<20 - 1) / (2 << 20)
			if int64(len(ps.Parts)) != n || ps.Root != res.Root.Digest || ps.Size != int64(len(want)) {
				t.Fatalf("split into %d parts (root %s, %d bytes), want %d parts of %d bytes, root %s", len(ps.Parts), ps.Root, ps.Size, n, len(want), res.Root.Digest)
			}
			var joined []byte
			for i, pt := range ps.Parts {
				data, err := os.ReadFile(filepath.Join(filepath.Dir(res.Path), pt.Name))
				if err != nil {
					t.Fatal(err)
				}
				if i < len(ps.Parts)-1 && len(data) != 2<<20 {
					t.Errorf("part %s is %d bytes, want exactly %d", pt.Name, len(data), 2<<20)
				}
				joined = append(joined, data...)
			}
			if !bytes.Equal(joined, want) {
				t.Fatal("the parts joined are not the archive")
			}
			// The archive goes: the parts alone are the package.
			if err := os.Remove(res.Path); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{res.Path + artifact.PartsIndexSuffix, res.Path + ".part002", res.Path} {
				r, err := artifact.Open(ctx, p)
				if err != nil {
					t.Fatalf("open %s: %v", filepath.Base(p), err)
				}
				if r.Root().Digest != res.Root.Digest {
					t.Errorf("open %s: root %s, want %s", filepath.Base(p), r.Root().Digest, res.Root.Digest)
				}
			}
			r := openPkg(t, res.Path)
			rep, err := artifact.Inspect(ctx, r, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Root != res.Root.Digest || rep.Blobs != res.Blobs {
				t.Errorf("inspect: root %s, %d blobs; want %s, %d", rep.Root, rep.Blobs, res.Root.Digest, res.Blobs)
			}
			ref := host + "/pkgs/small-" + strings.TrimPrefix(ext, ".") + ":1.0.0"
			pr, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			if pr.Root.Digest != res.Root.Digest || pr.Pushed+pr.Skipped != res.Blobs {
				t.Errorf("push: root %s, %d+%d blobs; want %s, %d", pr.Root.Digest, pr.Pushed, pr.Skipped, res.Root.Digest, res.Blobs)
			}
			out := filepath.Join(t.TempDir(), "pulled"+ext)
			if _, err := pullRemote(ctx, ref, out, artifact.PullOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
				t.Errorf("pulled %d bytes, split %d: not the same archive", len(got), len(want))
			}
		})
	}
}

// TestSplitDamage: a part with one byte flipped, a missing part, a short
// part and a part of another package are each refused in one line naming
// the part, and the index is not what makes the parts trusted.
func TestSplitDamage(t *testing.T) {
	ctx := context.Background()
	for _, ext := range []string{".tar.zst", ".tar"} {
		t.Run(ext, func(t *testing.T) {
			res, ps := splitPackage(t, ext, 2)
			part := func(i int) string { return filepath.Join(filepath.Dir(res.Path), ps.Parts[i].Name) }
			index := res.Path + artifact.PartsIndexSuffix
			walk := func() error {
				r, err := artifact.Open(ctx, index)
				if err != nil {
					return err
				}
				_, err = r.Walk(ctx, nil, nil)
				return err
			}
			refused := func(t *testing.T, err error, i int, what string) {
				t.Helper()
				var pe *artifact.PartError
				if !errors.As(err, &pe) || pe.Part != part(i) || !errors.Is(err, artifact.ErrCorrupt) {
					t.Fatalf("got %v, want a PartError naming %s", err, filepath.Base(part(i)))
				}
				if msg := err.Error(); !strings.Contains(msg, ps.Parts[i].Name+" "+what) || !strings.Contains(msg, "fetch it again") || strings.Contains(msg, "\n") {
					t.Errorf("message %q: want one line saying %s %s, fetch it again", msg, ps.Parts[i].Name, what)
				}
			}
			if err := walk(); err != nil {
				t.Fatal(err)
			}
			keep, err := os.ReadFile(part(2))
			if err != nil {
				t.Fatal(err)
			}
			restore := func() {
				if err := os.WriteFile(part(2), keep, 0o644); err != nil {
					t.Fatal(err)
				}
			}

			t.Run("flipped byte", func(t *testing.T) {
				defer restore()
				bad := bytes.Clone(keep)
				bad[len(bad)/2] ^= 1
				if err := os.WriteFile(part(2), bad, 0o644); err != nil {
					t.Fatal(err)
				}
				refused(t, walk(), 2, "is damaged")
			})
			t.Run("missing", func(t *testing.T) {
				defer restore()
				if err := os.Remove(part(2)); err != nil {
					t.Fatal(err)
				}
				refused(t, walk(), 2, "is missing")
			})
			t.Run("short", func(t *testing.T) {
				defer restore()
				if err := os.WriteFile(part(2), keep[:len(keep)-1], 0o644); err != nil {
					t.Fatal(err)
				}
				refused(t, walk(), 2, "is")
			})
			t.Run("first part of another package", func(t *testing.T) {
				first, err := os.ReadFile(part(0))
				if err != nil {
					t.Fatal(err)
				}
				defer os.WriteFile(part(0), first, 0o644)
				other := smallPackage(t, filepath.Join(t.TempDir(), "other"+ext), 3<<20)
				data, err := os.ReadFile(other.Path)
				if err != nil {
					t.Fatal(err)
				}
				// Another package of the same name and version, its first
				// 2 MiB: the index's digest differs, and the head names
				// another root.
				if err := os.WriteFile(part(0), data[:2<<20], 0o644); err != nil {
					t.Fatal(err)
				}
				refused(t, walk(), 0, "is damaged")
			})
			if err := walk(); err != nil {
				t.Fatalf("restored: %v", err)
			}
		})
	}
}

// TestSplitAgain: splitting again into fewer parts leaves no stale part of
// the first split; a split package is signed in place (the parts written
// again), verified, and split again from its parts.
func TestSplitAgain(t *testing.T) {
	ctx := context.Background()
	res, first := splitPackage(t, ".tar.zst", 1)
	dir := filepath.Dir(res.Path)
	second, err := artifact.Split(ctx, res.Path, artifact.SplitOptions{PartSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Parts) < 9 || len(second.Parts) != 3 {
		t.Fatalf("%d then %d parts, want ≥ 9 then 3", len(first.Parts), len(second.Parts))
	}
	parts := func() []string {
		m, err := filepath.Glob(filepath.Join(dir, "small.tar.zst.part[0-9]*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := parts(); len(got) != 3 {
		t.Fatalf("after the second split: %d part files %v, want 3", len(got), got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := os.Remove(res.Path); err != nil {
		t.Fatal(err)
	}
	alice, alicePub := keyPair(t, t.TempDir(), "alice")
	if _, err := artifact.Sign(ctx, openPkg(t, res.Path), "", alice, artifact.SignOptions{}); err != nil {
		t.Fatalf("sign the parts: %v", err)
	}
	if _, err := os.Stat(res.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("signing parts wrote %s: %v", res.Path, err)
	}
	vr, err := artifact.Verify(ctx, openPkg(t, res.Path), "", artifact.VerifyOptions{Keys: []artifact.Verifier{alicePub}})
	if err != nil || vr.Report.Root != res.Root.Digest {
		t.Fatalf("verify the signed parts: %v", err)
	}
	// Split again from the parts themselves, into more parts.
	third, err := artifact.Split(ctx, res.Path+".part001", artifact.SplitOptions{PartSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := parts(); len(got) != len(third.Parts) || len(got) != 5 {
		t.Fatalf("after splitting the parts: %d part files, index %d, want 5", len(got), len(third.Parts))
	}
	if _, err := artifact.Verify(ctx, openPkg(t, res.Path), "", artifact.VerifyOptions{Keys: []artifact.Verifier{alicePub}}); err != nil {
		t.Fatalf("verify after splitting again: %v", err)
	}
	if _, err := artifact.Split(ctx, res.Path, artifact.SplitOptions{PartSize: 1000}); err == nil {
		t.Error("parts of 1000 bytes: no error")
	}
}

// ExampleSplit splits a package archive into parts of at most 1 MiB (this
// small one fits one part) and opens it by its index.
func ExampleSplit() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "split-example-")
	defer os.RemoveAll(dir)
	pkg := examplePackage(dir)
	ps, err := artifact.Split(ctx, pkg, artifact.SplitOptions{PartSize: artifact.MinPartSize})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, pt := range ps.Parts {
		fmt.Println(pt.Name)
	}
	os.Remove(pkg)
	r, err := artifact.Open(ctx, pkg+artifact.PartsIndexSuffix)
	if err != nil {
		fmt.Println(err)
		return
	}
	sum, err := r.Walk(ctx, nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Config().Name, sum.Blobs, "blobs")
	// Output:
	// hello.tar.zst.part001
	// hello 5 blobs
}

// TestSplitIndexRefused: an index that is missing, or names parts outside
// its folder or of sizes that do not add up, is refused before any part
// is opened.
func TestSplitIndexRefused(t *testing.T) {
	ctx := context.Background()
	res, ps := splitPackage(t, ".tar", 4)
	index := res.Path + artifact.PartsIndexSuffix
	good, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(index); err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Open(ctx, res.Path+".part001"); err == nil || !strings.Contains(err.Error(), "the parts index "+index+" is missing") {
		t.Errorf("no index: %v", err)
	}
	for name, edit := range map[string]func(*artifact.Parts){
		"escaping name": func(p *artifact.Parts) { p.Parts[0].Name = "../" + p.Parts[0].Name },
		"package path":  func(p *artifact.Parts) { p.Package = "../x.tar" },
		"sizes":         func(p *artifact.Parts) { p.Size++ },
		"part size":     func(p *artifact.Parts) { p.PartSize = 0 },
		"media type":    func(p *artifact.Parts) { p.MediaType = "application/json" },
	} {
		t.Run(name, func(t *testing.T) {
			bad := *ps
			bad.Parts = append([]artifact.Part(nil), ps.Parts...)
			edit(&bad)
			data, _ := json.Marshal(bad)
			if err := os.WriteFile(index, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := artifact.Open(ctx, index); !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "parts index") {
				t.Errorf("got %v, want the parts index refused", err)
			}
		})
	}
	if err := os.WriteFile(index, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Open(ctx, index); err != nil {
		t.Fatal(err)
	}
}

// TestSplitOpenArchive: the parts sent whole (an upload) are the archive's
// bytes; a damaged part ends the stream with an error naming it.
func TestSplitOpenArchive(t *testing.T) {
	ctx := context.Background()
	res, ps := splitPackage(t, ".tar.zst", 2)
	want, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(res.Path)
	send := func() ([]byte, error) {
		r, err := artifact.Open(ctx, res.Path)
		if err != nil {
			return nil, err
		}
		rc, size, err := r.OpenArchive()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		if size != int64(len(want)) {
			t.Errorf("size %d, want %d", size, len(want))
		}
		return io.ReadAll(rc)
	}
	got, err := send()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the parts sent: %d bytes, %v; want the archive's %d", len(got), err, len(want))
	}
	last := filepath.Join(filepath.Dir(res.Path), ps.Parts[len(ps.Parts)-1].Name)
	data, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1 // the archive's last byte
	if err := os.WriteFile(last, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var pe *artifact.PartError
	if _, err := send(); !errors.As(err, &pe) || pe.Part != last {
		t.Fatalf("a damaged last part sent: %v, want it named", err)
	}
}
