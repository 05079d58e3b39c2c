package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

func TestCreateInspect(t *testing.T) {
	w := newWorld(t)
	out := filepath.Join(t.TempDir(), "demo.tar.zst")
	res := create(t, w, out)

	r, err := artifact.Open(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := artifact.Inspect(context.Background(), r, "", nil)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if rep.Name != "demo" || rep.Version != "1.0.0" || rep.Root != res.Root.Digest {
		t.Fatalf("report head = %s %s %s, want demo 1.0.0 %s", rep.Name, rep.Version, rep.Root, res.Root.Digest)
	}
	if rep.Signed {
		t.Error("an unsigned package reports a signature")
	}
	if len(rep.Components) != 2 {
		t.Fatalf("components = %d, want 2", len(rep.Components))
	}
	web, worker := rep.Components[0], rep.Components[1]
	if !web.Required || worker.Required {
		t.Errorf("required flags = %v %v, want true false", web.Required, worker.Required)
	}
	images := map[string]artifact.Image{}
	for _, c := range rep.Components {
		for _, i := range c.Images {
			images[i.Ref] = i
		}
	}
	checkImage := func(ref string, orig, stored digest.Digest) {
		t.Helper()
		i, ok := images[ref]
		if !ok {
			t.Errorf("image %s missing from report", ref)
			return
		}
		if i.OriginalDigest != orig || i.Digest != stored {
			t.Errorf("%s: original %s stored %s, want %s %s", ref, i.OriginalDigest, i.Digest, orig, stored)
		}
		if len(i.Platforms) != 1 || i.Platforms[0] != "linux/amd64" || i.Size <= 0 {
			t.Errorf("%s: platforms %v size %d", ref, i.Platforms, i.Size)
		}
	}
	// Multi-platform images keep only linux/amd64: the stored digest is that manifest's.
	checkImage(w.Host+"/library/web:1.0", w.WebIndex, w.WebAMD64)
	checkImage("docker.io/library/tool:3.1", w.ToolIndex, w.ToolAMD64)
	checkImage(w.Host+"/team/worker:2.0", w.WorkerManifest, w.WorkerManifest)

	if len(web.Charts) != 2 {
		t.Fatalf("charts = %+v", web.Charts)
	}
	if c := web.Charts[0]; c.Name != "app" || c.Version != "0.1.0" || c.Digest == "" {
		t.Errorf("local chart = %+v", c)
	}
	if c := web.Charts[1]; c.Name != "db" || c.Version != "2.3.4" || c.Digest != w.RemoteChart {
		t.Errorf("remote chart = %+v, want digest %s", c, w.RemoteChart)
	}
	if len(web.Manifests) != 1 || len(web.Manifests[0].Files) != 2 {
		t.Fatalf("manifests = %+v", web.Manifests)
	}
	conf, _ := os.ReadFile(filepath.Join(w.Dir, "files", "app.conf"))
	if len(web.Files) != 1 || web.Files[0].Digest != digest.FromBytes(conf) || web.Files[0].Target != "/etc/app/app.conf" {
		t.Errorf("files = %+v", web.Files)
	}
	if rep.StoredSize >= rep.TotalSize {
		t.Errorf("stored size %d not below total %d although layers are shared", rep.StoredSize, rep.TotalSize)
	}
	if rep.Blobs != res.Blobs {
		t.Errorf("inspect counts %d blobs, create wrote %d", rep.Blobs, res.Blobs)
	}
}

// TestArchiveLayout checks the entry order of docs/design/package-format.md and deduplication.
func TestArchiveLayout(t *testing.T) {
	w := newWorld(t)
	out := filepath.Join(t.TempDir(), "demo.tar")
	create(t, w, out)
	entries := readTar(t, out)
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Header.Name)
	}
	if len(names) < 5 || names[0] != "ferry.json" || names[1] != "oci-layout" || names[2] != "index.json" {
		t.Fatalf("leading entries = %v", names[:min(5, len(names))])
	}
	pos := map[digest.Digest]int{}
	seen := map[string]bool{}
	for i, e := range entries {
		if seen[e.Header.Name] {
			t.Errorf("entry %s stored twice", e.Header.Name)
		}
		seen[e.Header.Name] = true
		if e.Header.ModTime.Unix() != 0 || e.Header.Uid != 0 || e.Header.Uname != "" {
			t.Errorf("entry %s: mtime %v uid %d uname %q", e.Header.Name, e.Header.ModTime, e.Header.Uid, e.Header.Uname)
		}
		if hex, ok := strings.CutPrefix(e.Header.Name, "blobs/sha256/"); ok && hex != "" {
			d := digest.NewDigestFromEncoded(digest.SHA256, hex)
			pos[d] = i
			if digest.FromBytes(e.Data) != d {
				t.Errorf("entry %s does not hold its digest", e.Header.Name)
			}
		}
	}
	if _, ok := pos[w.SharedLayer]; !ok {
		t.Fatal("shared layer not stored")
	}
	// ferry.json is byte-identical to its blob.
	if _, ok := pos[digest.FromBytes(entries[0].Data)]; !ok {
		t.Error("ferry.json has no identical blob")
	}
	// Children come before parents.
	for _, e := range entries {
		var m struct {
			MediaType string               `json:"mediaType"`
			Config    *ocispec.Descriptor  `json:"config"`
			Layers    []ocispec.Descriptor `json:"layers"`
			Manifests []ocispec.Descriptor `json:"manifests"`
		}
		if !strings.HasPrefix(e.Header.Name, "blobs/") || json.Unmarshal(e.Data, &m) != nil || m.MediaType == "" {
			continue
		}
		kids := append(m.Layers, m.Manifests...)
		if m.Config != nil {
			kids = append(kids, *m.Config)
		}
		self := pos[digest.FromBytes(e.Data)]
		for _, k := range kids {
			p, ok := pos[k.Digest]
			if !ok {
				t.Errorf("%s refers to %s, which is not stored", e.Header.Name, k.Digest)
			} else if p > self {
				t.Errorf("%s comes before its child %s", e.Header.Name, k.Digest)
			}
		}
	}
}

func TestCreateReproducible(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	a := create(t, w, filepath.Join(dir, "a.tar.zst"))
	// Touch every source file: mtimes must not leak into the package.
	later := time.Now().Add(time.Hour)
	filepath.Walk(w.Dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, later, later) })
	b := create(t, w, filepath.Join(dir, "b.tar.zst"))
	ab, _ := os.ReadFile(a.Path)
	bb, _ := os.ReadFile(b.Path)
	if a.Root.Digest != b.Root.Digest || !bytes.Equal(ab, bb) {
		t.Fatalf("two creates differ: roots %s %s, %d vs %d bytes", a.Root.Digest, b.Root.Digest, len(ab), len(bb))
	}

	// SOURCE_DATE_EPOCH sets the created time, reproducibly.
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	epoch, err := artifact.SourceDateEpoch()
	if err != nil || epoch == nil {
		t.Fatalf("SourceDateEpoch = %v, %v", epoch, err)
	}
	def, _ := artifact.LoadDefinition(w.Dir)
	var roots []digest.Digest
	for _, name := range []string{"c.tar.zst", "d.tar.zst"} {
		res, err := artifact.Create(context.Background(), def, artifact.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(dir, name), Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		if res.Config.Created != "2023-11-14T22:13:20Z" {
			t.Errorf("created = %q", res.Config.Created)
		}
		roots = append(roots, res.Root.Digest)
	}
	cb, _ := os.ReadFile(filepath.Join(dir, "c.tar.zst"))
	db, _ := os.ReadFile(filepath.Join(dir, "d.tar.zst"))
	if roots[0] != roots[1] || !bytes.Equal(cb, db) || roots[0] == a.Root.Digest {
		t.Errorf("epoch creates: roots %v (unset-epoch root %s)", roots, a.Root.Digest)
	}
}

func TestOpenLayoutDir(t *testing.T) {
	w := newWorld(t)
	out := filepath.Join(t.TempDir(), "demo.tar")
	res := create(t, w, out)
	dir := t.TempDir()
	for _, e := range readTar(t, out) {
		p := filepath.Join(dir, filepath.FromSlash(e.Header.Name))
		if e.Header.Typeflag == '5' {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, e.Data, 0o644)
	}
	// Without ferry.json too: a layout pulled by another tool has none.
	os.Remove(filepath.Join(dir, "ferry.json"))
	r, err := artifact.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := artifact.Inspect(context.Background(), r, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Root != res.Root.Digest || rep.Blobs != res.Blobs || rep.Name != "demo" {
		t.Errorf("layout dir report: root %s blobs %d name %s", rep.Root, rep.Blobs, rep.Name)
	}
}

// TestOutputMustBeARegularFile: create refuses to rename its archive over
// anything but a regular file (a device, a pipe, a folder), and leaves it be.
func TestOutputMustBeARegularFile(t *testing.T) {
	w := newWorld(t)
	def, err := artifact.LoadDefinition(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fifo, dir} {
		_, err := artifact.Create(context.Background(), def, artifact.CreateOptions{Charts: chart.Packager{}, Output: out})
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("create -o %s: %v", out, err)
		}
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the pipe was replaced: %v %v", fi.Mode(), err)
	}
}

// TestImagePlatformFromDefinition: an image whose config names no platform
// is refused naming the image and saying how to declare its platform; a
// `platform:` in its entry declares it, and one that contradicts the
// config is refused.
func TestImagePlatformFromDefinition(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	push := func(tag string, config []byte) {
		cdesc, err := oras.PushBytes(ctx, store, ocispec.MediaTypeImageConfig, config)
		if err != nil {
			t.Fatal(err)
		}
		layer := fixture.NewLayer(fixture.Rand(uint64(len(tag))), 1024).Data
		ldesc, err := oras.PushBytes(ctx, store, ocispec.MediaTypeImageLayerGzip, layer)
		if err != nil {
			t.Fatal(err)
		}
		m, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{ConfigDescriptor: &cdesc, Layers: []ocispec.Descriptor{ldesc}})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Tag(ctx, m, tag); err != nil {
			t.Fatal(err)
		}
	}
	push("noplat", []byte(`{"rootfs":{"type":"layers","diff_ids":[]}}`))
	push("amd64", []byte(`{"os":"linux","architecture":"amd64","rootfs":{"type":"layers","diff_ids":[]}}`))
	def := func(entry string) *artifact.Definition {
		writeFile(t, filepath.Join(dir, artifact.DefinitionFileName), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: p, version: '1'}\nplatforms: [linux/amd64]\ncomponents:\n  - name: c\n    images:\n      - "+entry+"\n")
		d, err := artifact.LoadDefinition(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	out := filepath.Join(t.TempDir(), "p.tar")
	_, err = artifact.Create(ctx, def("{ref: example.com/app:noplat, layout: images}"), artifact.CreateOptions{Charts: chart.Packager{}, Output: out})
	var de *artifact.DefinitionError
	if !errors.As(err, &de) || de.Field != "components[0].images[0]" || !strings.Contains(err.Error(), "image example.com/app:noplat: its config sha256:") || !strings.Contains(err.Error(), "`platform: os/arch`") {
		t.Fatalf("an image with no platform: %v", err)
	}
	res, err := artifact.Create(ctx, def("{ref: example.com/app:noplat, layout: images, platform: linux/amd64}"), artifact.CreateOptions{Charts: chart.Packager{}, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Config.Components[0].Images[0].Platforms; len(p) != 1 || p[0] != "linux/amd64" {
		t.Fatalf("recorded platforms %v", p)
	}
	_, err = artifact.Create(ctx, def("{ref: example.com/app:amd64, layout: images, platform: linux/arm64}"), artifact.CreateOptions{Charts: chart.Packager{}, Output: out})
	if !errors.As(err, &de) || de.Field != "components[0].images[0]" || !strings.Contains(err.Error(), "image example.com/app:amd64 is linux/amd64 (its config") {
		t.Fatalf("a contradicting platform: %v", err)
	}
}

// A manifests entry may join at most MaxManifestFiles files, and no
// package is written whose ferry.json a reader would refuse: create
// refuses first, with nothing written.
func TestCreateManifestFilesBounded(t *testing.T) {
	dir := t.TempDir()
	many := filepath.Join(dir, "many")
	if err := os.MkdirAll(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= artifact.MaxManifestFiles; i++ {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("m%05d.yaml", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: many, version: 1.0.0}\ncomponents:\n  - name: c\n    manifests: [{name: m, files: [many]}]\n")
	def, err := artifact.LoadDefinition(filepath.Join(dir, "ferry.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "many.tar.zst")
	_, err = artifact.Create(context.Background(), def, artifact.CreateOptions{Output: out})
	if err == nil || !strings.Contains(err.Error(), "more than 10000 manifest files") {
		t.Fatalf("%d files in one manifests entry: %v", artifact.MaxManifestFiles+1, err)
	}
	assertNoOutput(t, filepath.Dir(out))
}
