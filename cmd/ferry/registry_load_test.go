package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// writeBigLayoutImage writes a one-layer linux image whose layer holds size
// random bytes into the OCI layout dir, tagged tag.
func writeBigLayoutImage(t *testing.T, dir, tag string, size int, seed uint64) {
	t.Helper()
	ctx := context.Background()
	store, err := oci.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fixture.PushImage(ctx, store, fixture.Platform("linux", runtime.GOARCH, ""), []fixture.Layer{fixture.NewLayer(fixture.Rand(seed), size)})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, m, tag); err != nil {
		t.Fatal(err)
	}
}

// uploadBytes sums the sizes of the files in the upload sessions
// (<repository>/_uploads/) of the filesystem storage at root.
func uploadBytes(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(root, "docker", "registry", "v2", "repositories"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.IsDir() && strings.Contains(filepath.ToSlash(p), "/_uploads/") {
			fi, err := d.Info()
			if err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// killLoadMidUpload starts `ferry registry load pkg --root root`, waits
// until its registry holds at least 16 MiB of an upload in progress, and
// kills it (its process group) with SIGKILL.
func killLoadMidUpload(t *testing.T, dir, pkg, root string) {
	t.Helper()
	cmd := exec.Command(ferryBin, "registry", "load", pkg, "--root", root)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for uploadBytes(t, root) < 16<<20 {
		select {
		case err := <-exited:
			t.Fatalf("ferry registry load ended (%v) before it was killed: make the package larger\n%s", err, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("no upload in progress after 2 min\n%s", stderr.String())
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
}

// TestRegistryLoadKilledLeavesNoUploads kills a real `ferry registry load`
// with SIGKILL in the middle of a large upload: its upload session stays in
// the storage (the data so far, _uploads). The next load (of another
// package) and `ferry registry gc` each remove it: no upload data is left.
func TestRegistryLoadKilledLeavesNoUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("a 256 MiB package")
	}
	dir := t.TempDir()
	def := func(name, img string) string {
		return "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: " + name + ", version: 0.1.0}\nplatforms: [linux/" + runtime.GOARCH + "]\ncomponents:\n  - name: c\n    images:\n      - {ref: docker.io/library/" + img + ":1.0, layout: " + img + "}\n"
	}
	writeBigLayoutImage(t, filepath.Join(dir, "big", "big"), "1.0", 256<<20, 1)
	writeFile(t, filepath.Join(dir, "big", "ferry.yaml"), def("big", "big"))
	writeBigLayoutImage(t, filepath.Join(dir, "small", "small"), "1.0", 64<<10, 2)
	writeFile(t, filepath.Join(dir, "small", "ferry.yaml"), def("small", "small"))
	for _, p := range []string{"big", "small"} {
		if _, stderr, code := runFerry(t, filepath.Join(dir, p), "package", "create", "-f", filepath.Join(dir, p+".tar"), "--sbom=false"); code != 0 {
			t.Fatalf("package create %s: %s", p, stderr)
		}
	}
	root := filepath.Join(dir, "registry")

	killLoadMidUpload(t, dir, "big.tar", root)
	left := uploadBytes(t, root)
	if left == 0 {
		t.Fatal("the killed load left no upload data: the test saw nothing to purge")
	}
	t.Logf("killed load left %d MiB in _uploads", left>>20)
	out, stderr, code := runFerry(t, dir, "registry", "load", "small.tar", "--root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("load after the killed one: exit %d: %s", code, stderr)
	}
	var res struct{ Loaded []json.RawMessage }
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Loaded) != 1 {
		t.Fatalf("load printed %s (%v)", out, err)
	}
	if n := uploadBytes(t, root); n != 0 {
		t.Fatalf("after the next load: %d bytes of upload data left, want none", n)
	}

	killLoadMidUpload(t, dir, "big.tar", root)
	if uploadBytes(t, root) == 0 {
		t.Fatal("the second killed load left no upload data")
	}
	out, stderr, code = runFerry(t, dir, "registry", "gc", "--root", root, "--settle", "100ms")
	if code != 0 {
		t.Fatalf("gc: exit %d: %s", code, stderr)
	}
	if stderr != "" || !strings.Contains(out, "abandoned upload sessions") {
		t.Fatalf("gc printed %q on stdout and %q on stderr, want one line naming the removed uploads and no log", out, stderr)
	}
	if n := uploadBytes(t, root); n != 0 {
		t.Fatalf("after gc: %d bytes of upload data left, want none", n)
	}
}
