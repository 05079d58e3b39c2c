package artifact_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
)

// TestCreateConfined: whatever kind of input a definition names — a file,
// a manifests folder, a chart folder, an OCI layout — a link leading out of
// the definition's folder is refused, never read, and a FIFO or a device is
// refused without blocking; each refusal is one line naming the input and
// leaves no output.
func TestCreateConfined(t *testing.T) {
	w := newWorld(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret.yaml"), "apiVersion: v1\nkind: Secret\nmetadata: {name: stolen}\n")
	secret := filepath.Join(outside, "secret.yaml")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(filepath.Join(w.Dir, name)), 0o755))
		must(os.Symlink(target, filepath.Join(w.Dir, name)))
	}
	fifo := func(name string) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(filepath.Join(w.Dir, name)), 0o755))
		must(syscall.Mkfifo(filepath.Join(w.Dir, name), 0o644))
	}
	// files
	link(secret, "files/link.conf")
	link("../../"+filepath.Base(outside)+"/secret.yaml", "files/rel.conf")
	fifo("files/fifo.conf")
	link("/dev/zero", "files/zero.conf")
	// manifests: a link among the files of a folder, a folder that is a link
	link(secret, "evil/manifests/a.yaml")
	link(outside, "evilfolder")
	fifo("fifomanifests/x.yaml")
	// a chart whose template is a link out, a chart folder that is a link
	for _, f := range []string{"Chart.yaml", "values.yaml"} {
		data, err := os.ReadFile(filepath.Join(w.Dir, "charts", "app", f))
		must(err)
		writeFile(t, filepath.Join(w.Dir, "evilchart", f), string(data))
	}
	link(secret, "evilchart/templates/x.yaml")
	link("charts/app", "chartlink-inside") // inside (relative): followed; an absolute link is always refused
	// an OCI layout whose blobs are links out, or a FIFO
	for _, name := range []string{"layoutlink", "layoutfifo"} {
		must(os.CopyFS(filepath.Join(w.Dir, name), os.DirFS(filepath.Join(w.Dir, "images"))))
	}
	blobs, _ := filepath.Glob(filepath.Join(w.Dir, "layoutlink", "blobs", "sha256", "*"))
	for _, b := range blobs {
		data, _ := os.ReadFile(b)
		copyTo := filepath.Join(outside, filepath.Base(b))
		must(os.WriteFile(copyTo, data, 0o644))
		must(os.Remove(b))
		must(os.Symlink(copyTo, b))
	}
	blobs, _ = filepath.Glob(filepath.Join(w.Dir, "layoutfifo", "blobs", "sha256", "*"))
	for _, b := range blobs {
		must(os.Remove(b))
		must(syscall.Mkfifo(b, 0o644))
	}

	head := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: bad, version: 1.0.0}\nplatforms: [linux/amd64]\ncomponents:\n  - name: a\n"
	out := "leads outside the definition's folder"
	tests := []struct{ name, body, want string }{
		{"file link", "    files: [{source: files/link.conf, target: /x}]\n", "files/link.conf " + out},
		{"file relative link", "    files: [{source: files/rel.conf, target: /x}]\n", "files/rel.conf " + out},
		{"file fifo", "    files: [{source: files/fifo.conf, target: /x}]\n", "is not a regular file"},
		{"file device", "    files: [{source: files/zero.conf, target: /x}]\n", out},
		{"manifest link in a folder", "    manifests: [{name: m, files: [evil/manifests]}]\n", out},
		{"manifest folder link", "    manifests: [{name: m, files: [evilfolder]}]\n", out},
		{"manifest fifo", "    manifests: [{name: m, files: [fifomanifests]}]\n", "is not a regular file"},
		{"chart template link", "    charts: [{path: evilchart}]\n", out},
		{"layout blob link", "    images: [{ref: x/tool:3.1, layout: layoutlink}]\n", out},
		{"layout blob fifo", "    images: [{ref: x/tool:3.1, layout: layoutfifo}]\n", "is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(w.Dir, "ferry.yaml")
			writeFile(t, path, head+tt.body)
			def, err := definition.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			outDir := t.TempDir()
			done := make(chan error, 1)
			go func() {
				_, err := build.Create(t.Context(), def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(outDir, "out.tar.zst")})
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("create blocked")
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "stolen") {
				t.Fatalf("error %v, want one line containing %q", err, tt.want)
			}
			is := confine.ErrEscapes
			if tt.want == "is not a regular file" {
				is = confine.ErrNotRegular
			}
			if !errors.Is(err, is) {
				t.Errorf("error %v is not %v", err, is)
			}
			assertNoOutput(t, outDir)
		})
	}

	// A link that stays inside is followed.
	writeFile(t, filepath.Join(w.Dir, "ferry.yaml"), head+"    charts: [{path: chartlink-inside}]\n")
	def, err := definition.Load(filepath.Join(w.Dir, "ferry.yaml"))
	must(err)
	if _, err := build.Create(t.Context(), def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(t.TempDir(), "ok.tar.zst")}); err != nil {
		t.Fatalf("a chart linked inside the folder: %v", err)
	}
}
