package registry

import (
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
)

// TestWritebackDriver: on filesystem storage, distribution's writers of
// upload data are wrapped (and what they write arrives whole, appended to
// as a chunked upload does), hash states are stored by the middleware;
// other files and other storage are not.
func TestWritebackDriver(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	fs, err := factory.Create(ctx, "filesystem", map[string]any{"rootdirectory": root})
	if err != nil {
		t.Fatal(err)
	}
	d, err := newWritebackDriver(ctx, fs, map[string]any{"rootdirectory": root})
	if err != nil {
		t.Fatal(err)
	}
	const p = "/docker/registry/v2/repositories/a/_uploads/u/data"
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	for i, part := range [][]byte{data[:5<<20], data[5<<20:]} {
		w, err := d.Writer(ctx, p, i > 0)
		if err != nil {
			t.Fatal(err)
		}
		wf, ok := w.(*writebackFile)
		if !ok {
			t.Fatalf("writer of %s is %T, want *writebackFile", p, w)
		}
		if _, err := w.Write(part); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if wf.wb.Off != int64(len(data)) {
			t.Fatalf("appending writer counts to %d, want %d", wf.wb.Off, len(data))
		}
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.GetContent(ctx, p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(data))
	}
	// A writer that writes nothing (a request refused for a stale
	// state, which distribution then never closes) holds no second
	// handle: it is opened once there is something to write back.
	idle, err := d.Writer(ctx, p, true)
	if err != nil {
		t.Fatal(err)
	}
	if wf := idle.(*writebackFile); wf.f != nil {
		t.Fatal("a writer that wrote nothing holds a second handle on the file")
	}
	_ = idle.Close()
	w, err := d.Writer(ctx, "/docker/registry/v2/repositories/a/_uploads/u/startedat", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.(*writebackFile); ok {
		t.Fatal("startedat is wrapped: only upload data is")
	}
	_ = w.Cancel(ctx)
	// A hash state is stored whole (no temporary left beside it); other
	// files go through the driver.
	if err := fs.PutContent(ctx, "/docker/registry/v2/repositories/a/_uploads/u/startedat", []byte("now")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"/docker/registry/v2/repositories/a/_uploads/u/hashstates/sha256/16777216": true,
		"/docker/registry/v2/repositories/a/_uploads/u/startedat":                  false,
		"/docker/registry/v2/repositories/a/_layers/sha256/ab/link":                false,
		"/docker/registry/v2/repositories/hashstates/x/_uploads/link":              false,
	} {
		if hashState(p) != want {
			t.Errorf("hashState(%s) = %v", p, !want)
		}
		if err := d.PutContent(ctx, p, []byte("state of "+p)); err != nil {
			t.Fatal(err)
		}
		if got, err := fs.GetContent(ctx, p); err != nil || string(got) != "state of "+p {
			t.Fatalf("%s read back %q, %v", p, got, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(root, "docker/registry/v2/repositories/a/_uploads/u/hashstates/sha256/*.tmp")); len(left) != 0 {
		t.Fatalf("temporaries left: %v", left)
	}
	// The hash state of a session removed (cancelled, committed) is not
	// written: distribution closes a cancelled upload after removing it.
	gone := "/docker/registry/v2/repositories/a/_uploads/gone/hashstates/sha256/7"
	if err := d.PutContent(ctx, gone, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path.Dir(path.Dir(path.Dir(gone)))))); !os.IsNotExist(err) {
		t.Fatalf("the state of a removed session recreated its folder: %v", err)
	}
	if _, err := newWritebackDriver(ctx, fs, nil); err == nil {
		t.Fatal("no rootdirectory: want an error")
	}

	for _, c := range []Config{{RootDir: root}, {}, {S3: &S3{Bucket: "b"}}} {
		dc, err := c.distribution()
		if err != nil {
			t.Fatal(err)
		}
		mw := dc.Middleware["storage"]
		if on := len(mw) == 1 && mw[0].Name == writebackMiddleware; on != (c.RootDir != "") {
			t.Errorf("storage %q: middleware %v", c.storageName(), mw)
		}
	}
}
