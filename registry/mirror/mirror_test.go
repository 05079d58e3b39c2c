package mirror_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/mirror"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func TestMirrorPath(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/library/nginx:1.27": "library/nginx:1.27",
		"nginx:1.27":                   "library/nginx:1.27",
		"ghcr.io/org/app:v1":           "org/app:v1",
		"127.0.0.1:5000/a/b/c:2":       "a/b/c:2",
	} {
		repo, tag, err := artifact.ImagePath(in)
		if err != nil || repo+":"+tag != want {
			t.Errorf("MirrorPath(%q) = %s:%s, %v; want %s", in, repo, tag, err, want)
		}
	}
}

// mirrorPackage creates a package with two images from a generated layout.
func mirrorPackage(t *testing.T) (*artifact.Reader, map[string]string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	rng := fixture.Rand(5)
	amd := fixture.Platform("linux", "amd64", "")
	base := fixture.NewLayer(rng, 32<<10)
	want := map[string]string{}
	for _, name := range []string{"app", "tool"} {
		d, err := fixture.PushImage(ctx, store, amd, []fixture.Layer{base, fixture.NewLayer(rng, 8<<10)})
		if err != nil {
			t.Fatal(err)
		}
		store.Tag(ctx, d, name)
		want[name] = d.Digest.String()
	}
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: mirrored, version: 2.0.0}\nplatforms: [linux/amd64]\ncomponents:\n  - name: c\n    images:\n      - {ref: docker.io/library/app:1.0, layout: images, tag: app}\n      - {ref: ghcr.io/org/tool:v1, layout: images, tag: tool}\n"
	os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644)
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(t.TempDir(), "m.tar.zst")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, res.Path)
	if err != nil {
		t.Fatal(err)
	}
	return r, want
}

// TestLoadMirror: a package loaded into a storage root without serving is
// then served under the images' original paths and tags; skopeo and crane
// see the recorded digests.
func TestLoadMirror(t *testing.T) {
	skopeo := peertool.Require(t, "skopeo")
	crane := peertool.Require(t, "crane")
	r, want := mirrorPackage(t)
	root := t.TempDir()
	results, err := mirror.LoadInto(context.Background(), registry.Config{RootDir: root}, []*artifact.Reader{r})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || len(results[0].Images) != 2 || results[0].Package != "mirrored:2.0.0" {
		t.Fatalf("load results = %+v", results)
	}
	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))

	out := t.TempDir()
	cmd := exec.Command(skopeo, "copy", "--preserve-digests", "--src-tls-verify=false", "docker://"+host+"/library/app:1.0", "oci:"+out+":app")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, b)
	}
	var idx ocispec.Index
	data, _ := os.ReadFile(filepath.Join(out, "index.json"))
	if err := json.Unmarshal(data, &idx); err != nil || len(idx.Manifests) != 1 || idx.Manifests[0].Digest.String() != want["app"] {
		t.Fatalf("skopeo copied %s, want %s", data, want["app"])
	}
	b, err := exec.Command(crane, "digest", host+"/org/tool:v1").Output()
	if err != nil || strings.TrimSpace(string(b)) != want["tool"] {
		t.Fatalf("crane digest org/tool:v1 = %q, %v; want %s", b, err, want["tool"])
	}
	// The package itself is there under its name.
	repo, err := artifact.RemoteOptions{}.Repository(host + "/mirrored:2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Inspect(context.Background(), repo, "2.0.0", nil); err != nil {
		t.Fatal(err)
	}
	cfg := mirror.Snippets(host, results)
	for _, s := range []string{"certs.d/docker.io/hosts.toml", "certs.d/ghcr.io/hosts.toml", `[host."http://` + host + `"]`, "registry-mirrors"} {
		if !strings.Contains(cfg, s) {
			t.Errorf("mirror config lacks %q:\n%s", s, cfg)
		}
	}
}

// TestLoadIntoReturnsWhenLoadEndsAtOnce stops the loading registry right
// after starting it (nothing to load): LoadInto must not wait for a Serve
// that began after its Shutdown (run with -race by make test).
func TestLoadIntoReturnsWhenLoadEndsAtOnce(t *testing.T) {
	root := t.TempDir()
	for range 20 {
		done := make(chan error, 1)
		go func() {
			_, err := mirror.LoadInto(context.Background(), registry.Config{RootDir: root}, nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("LoadInto with nothing to load did not return within 10s")
		}
	}
}
