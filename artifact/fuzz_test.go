package artifact_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
)

// FuzzReadArchive: the reader never panics on arbitrary archive bytes, and
// never accepts an archive whose blobs do not hold their digests.
//
//	go test ./artifact -run '^$' -fuzz FuzzReadArchive -fuzztime 60s
func FuzzReadArchive(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/archive/*.tar")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err == nil {
			f.Add(b)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "ferry.json", Size: 2, Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Write([]byte("{}"))
	tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.tar")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := artifact.Open(context.Background(), p)
		if err != nil {
			return
		}
		rep, err := artifact.Inspect(context.Background(), r, "", nil)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if rep.Root == "" || rep.Name == "" {
			t.Fatalf("accepted a package without root or name")
		}
	})
}

// FuzzReadLayout: the reader never panics or hangs on a layout folder made
// from arbitrary bytes (a tar of its files, extracted as it says: regular
// files, folders, links to /dev/zero or within the folder, FIFOs), every
// error it returns is one line, and a folder it accepts has a root and a
// name.
//
//	go test ./artifact -run '^$' -fuzz FuzzReadLayout -fuzztime 60s
func FuzzReadLayout(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/archive/*.tar")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		tr := tar.NewReader(bytes.NewReader(data))
		for n := 0; n < 256; n++ {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if !filepath.IsLocal(h.Name) {
				continue
			}
			p := filepath.Join(dir, h.Name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			// A later entry replaces an earlier one of the same name; the
			// harness itself must not write through a link or into a FIFO
			// (which blocks).
			os.RemoveAll(p)
			switch h.Typeflag {
			case tar.TypeDir:
				os.MkdirAll(p, 0o755)
			case tar.TypeReg:
				b, _ := io.ReadAll(io.LimitReader(tr, 1<<20))
				if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644); err == nil {
					f.Write(b)
					f.Close()
				}
			case tar.TypeSymlink:
				target := "/dev/zero"
				if filepath.IsLocal(h.Linkname) {
					target = filepath.Join(dir, h.Linkname)
				}
				os.Symlink(target, p)
			case tar.TypeFifo:
				syscall.Mkfifo(p, 0o644)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		var rep *artifact.Report
		go func() {
			r, err := artifact.Open(ctx, dir)
			if err == nil {
				rep, err = artifact.Inspect(ctx, r, "", nil)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("multi-line error %q", err)
				}
				return
			}
			if rep.Root == "" || rep.Name == "" {
				t.Fatalf("accepted a layout without root or name")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the reader hangs")
		}
	})
}
