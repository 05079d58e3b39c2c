package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
	"oras.land/oras-go/v2/errdef"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
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
	epoch, err := build.SourceDateEpoch()
	if err != nil || epoch == nil {
		t.Fatalf("SourceDateEpoch = %v, %v", epoch, err)
	}
	def, _ := definition.Load(w.Dir)
	var roots []digest.Digest
	for _, name := range []string{"c.tar.zst", "d.tar.zst"} {
		res, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(dir, name), Epoch: epoch})
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
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fifo, dir} {
		_, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out})
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
	def := func(entry string) *definition.Definition {
		writeFile(t, filepath.Join(dir, definition.FileName), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: p, version: '1'}\nplatforms: [linux/amd64]\ncomponents:\n  - name: c\n    images:\n      - "+entry+"\n")
		d, err := definition.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	out := filepath.Join(t.TempDir(), "p.tar")
	_, err = build.Create(ctx, def("{ref: example.com/app:noplat, layout: images}"), build.CreateOptions{Charts: chart.Packager{}, Output: out})
	var de *definition.Error
	if !errors.As(err, &de) || de.Field != "components[0].images[0]" || !strings.Contains(err.Error(), "image example.com/app:noplat: its config sha256:") || !strings.Contains(err.Error(), "`platform: os/arch`") {
		t.Fatalf("an image with no platform: %v", err)
	}
	res, err := build.Create(ctx, def("{ref: example.com/app:noplat, layout: images, platform: linux/amd64}"), build.CreateOptions{Charts: chart.Packager{}, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Config.Components[0].Images[0].Platforms; len(p) != 1 || p[0] != "linux/amd64" {
		t.Fatalf("recorded platforms %v", p)
	}
	_, err = build.Create(ctx, def("{ref: example.com/app:amd64, layout: images, platform: linux/arm64}"), build.CreateOptions{Charts: chart.Packager{}, Output: out})
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
	def, err := definition.Load(filepath.Join(dir, "ferry.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "many.tar.zst")
	_, err = build.Create(context.Background(), def, build.CreateOptions{Output: out})
	if err == nil || !strings.Contains(err.Error(), "more than 10000 manifest files") {
		t.Fatalf("%d files in one manifests entry: %v", artifact.MaxManifestFiles+1, err)
	}
	assertNoOutput(t, filepath.Dir(out))
}

// TestCreateBadSources: errors found while resolving name the item.
func TestCreateBadSources(t *testing.T) {
	w := newWorld(t)
	head := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: bad\n  version: 1.0.0\nplatforms: [linux/amd64]\ncomponents:\n  - name: a\n"
	os.Symlink("/etc", filepath.Join(w.Dir, "escape"))
	writeFile(t, filepath.Join(w.Dir, "manifests", "broken.yaml"), "apiVersion: v1\nkind: [\n")
	writeFile(t, filepath.Join(w.Dir, "manifests", "notk8s.yaml"), "hello: world\n")
	tests := []struct {
		name, body, want string
		is               error // the cause, when it is a sentinel
	}{
		{"unknown tag", "    images: [" + w.Host + "/library/web:nope]\n", "ferry.yaml:9: components[0].images[0]: resolve", errdef.ErrNotFound},
		{"unreachable registry", "    images: [127.0.0.1:1/x/y:1]\n", "ferry.yaml:9: components[0].images[0]: resolve 127.0.0.1:1/x/y:1", syscall.ECONNREFUSED},
		{"platform missing", "    images: [" + w.Host + "/team/worker:2.0]\n", "", nil},
		{"layout tag missing", "    images:\n      - ref: x/y:9\n        layout: images\n", "components[0].images[0]: image \"9\" not found in OCI layout images", nil},
		{"symlink escape", "    files:\n      - source: escape/hostname\n        target: /x\n", "escape/hostname leads outside the definition's folder", confine.ErrEscapes},
		{"missing file", "    files:\n      - source: nope.txt\n        target: /x\n", "components[0].files[0]: ", fs.ErrNotExist},
		{"broken manifest", "    manifests:\n      - name: m\n        files: [manifests/broken.yaml]\n", "components[0].manifests[0]: manifests/broken.yaml: invalid YAML", nil},
		{"not kubernetes", "    manifests:\n      - name: m\n        files: [manifests/notk8s.yaml]\n", "is not a Kubernetes object", nil},
		{"chart not a chart", "    charts:\n      - path: files\n", "components[0].charts[0]: load chart files", nil},
		{"remote chart is an image", "    charts:\n      - url: oci://" + w.Host + "/team/worker\n        version: \"2.0\"\n", "is not a Helm chart", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if tt.name == "platform missing" {
				body = strings.Replace(head, "linux/amd64", "linux/s390x", 1) + body
			} else {
				body = head + body
			}
			path := filepath.Join(w.Dir, "ferry.yaml")
			writeFile(t, path, body)
			def, err := definition.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "out.tar.zst")
			_, err = build.Create(t.Context(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out})
			if err == nil {
				t.Fatal("create succeeded")
			}
			want := tt.want
			if tt.name == "platform missing" {
				want = "image is linux/amd64 only; the package's platforms are linux/s390x"
			}
			if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want %q", err, want)
			}
			var de *definition.Error
			if !errors.As(err, &de) || !strings.HasPrefix(de.Field, "components[0].") {
				t.Errorf("error %v is not a *DefinitionError naming the item", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			assertNoOutput(t, filepath.Dir(out))
		})
	}
}

// assertNoOutput fails when dir holds any file: no package, no temp file.
func assertNoOutput(t testing.TB, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
}

// SOURCE_DATE_EPOCH outside 1970–9999 is refused: neither a tar header
// nor an RFC 3339 time holds it.
func TestSourceDateEpochRange(t *testing.T) {
	for _, v := range []string{"-1", "253402300800", "9223372036854775807", "x"} {
		t.Setenv("SOURCE_DATE_EPOCH", v)
		if _, err := build.SourceDateEpoch(); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH=%s accepted", v)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "253402300799")
	if ts, err := build.SourceDateEpoch(); err != nil || ts.Year() != 9999 {
		t.Errorf("the last second of 9999: %v, %v", ts, err)
	}
}
