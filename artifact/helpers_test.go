package artifact_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// world is a generated set of sources for a definition: a registry with
// images and an OCI chart, an OCI layout, a chart folder, manifests, files.
type world struct {
	Dir  string // the definition folder
	Host string // the in-process registry
	// Expected digests.
	WebIndex, WebAMD64, WorkerManifest, ToolIndex, ToolAMD64 digest.Digest
	RemoteChart                                              digest.Digest
	SharedLayer                                              digest.Digest
}

func remoteRepo(t testing.TB, ref string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	return repo
}

// newWorld builds the sources and a ferry.yaml using all of them.
func newWorld(t testing.TB) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{Dir: t.TempDir(), Host: registrytest.New(t)}
	rng := fixture.Rand(42)
	amd, arm := fixture.Platform("linux", "amd64", ""), fixture.Platform("linux", "arm64", "v8")
	shared := fixture.NewLayer(rng, 64<<10)
	w.SharedLayer = digest.FromBytes(shared.Data)

	// Registry: a multi-platform web image and a single-platform worker.
	mem := memory.New()
	web, err := fixture.MultiPlatformImage(ctx, mem, rng, []ocispec.Platform{amd, arm}, []fixture.Layer{shared}, 2, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	w.WebIndex = web.Digest
	w.WebAMD64 = platformChild(t, ctx, mem, web, "amd64")
	if err := mem.Tag(ctx, web, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.Copy(ctx, mem, "web", remoteRepo(t, w.Host+"/library/web:1.0"), "1.0", oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	worker, err := fixture.PushImage(ctx, mem, amd, []fixture.Layer{shared, fixture.NewLayer(rng, 16<<10)})
	if err != nil {
		t.Fatal(err)
	}
	w.WorkerManifest = worker.Digest
	_ = mem.Tag(ctx, worker, "worker")
	if _, err := oras.Copy(ctx, mem, "worker", remoteRepo(t, w.Host+"/team/worker:2.0"), "2.0", oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}

	// OCI layout: a multi-platform tool image.
	layoutDir := filepath.Join(w.Dir, "images")
	store, err := oci.New(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	tool, err := fixture.MultiPlatformImage(ctx, store, rng, []ocispec.Platform{amd, arm}, []fixture.Layer{shared}, 1, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	w.ToolIndex = tool.Digest
	w.ToolAMD64 = platformChild(t, ctx, store, tool, "amd64")
	if err := store.Tag(ctx, tool, "3.1"); err != nil {
		t.Fatal(err)
	}

	// Charts: a folder, and one in the registry as Helm pushes it.
	if _, err := fixture.Chart(filepath.Join(w.Dir, "charts"), "app", "0.1.0", "docker.io/library/web:1.0"); err != nil {
		t.Fatal(err)
	}
	w.RemoteChart = pushChart(t, ctx, w.Host+"/charts/db", "db", "2.3.4")

	// Manifests and files.
	writeFile(t, filepath.Join(w.Dir, "manifests", "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n")
	writeFile(t, filepath.Join(w.Dir, "manifests", "more", "svc.yaml"), "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80}]\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web\n")
	writeFile(t, filepath.Join(w.Dir, "files", "app.conf"), "listen = 8080\n")

	writeFile(t, filepath.Join(w.Dir, definition.FileName), fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: demo
  version: 1.0.0
  description: a generated package
platforms: [linux/amd64]
components:
  - name: web
    description: the web tier
    images:
      - %[1]s/library/web:1.0
      - ref: docker.io/library/tool:3.1
        layout: images
    charts:
      - path: charts/app
      - url: oci://%[1]s/charts/db
        version: 2.3.4
    manifests:
      - name: web-config
        files: [manifests/cm.yaml, manifests/more]
    files:
      - source: files/app.conf
        target: /etc/app/app.conf
  - name: worker
    required: false
    images:
      - %[1]s/team/worker:2.0
`, w.Host))
	return w
}

func writeFile(t testing.TB, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func platformChild(t testing.TB, ctx context.Context, src interface {
	Fetch(context.Context, ocispec.Descriptor) (io.ReadCloser, error)
}, idx ocispec.Descriptor, arch string) digest.Digest {
	t.Helper()
	rc, err := src.Fetch(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var index ocispec.Index
	if err := jsonDecode(rc, &index); err != nil {
		t.Fatal(err)
	}
	for _, m := range index.Manifests {
		if m.Platform != nil && m.Platform.Architecture == arch {
			return m.Digest
		}
	}
	t.Fatalf("no %s manifest", arch)
	return ""
}

// pushChart packages a generated chart and pushes it as Helm does.
func pushChart(t testing.TB, ctx context.Context, repoRef, name, version string) digest.Digest {
	t.Helper()
	dir := t.TempDir()
	path, err := fixture.Chart(dir, name, version, "docker.io/library/db:1")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	tgzPath, err := chartutil.Save(ch, dir)
	if err != nil {
		t.Fatal(err)
	}
	tgz, _ := os.ReadFile(tgzPath)
	mem := memory.New()
	cfg, _ := jsonMarshal(ch.Metadata)
	cdesc, _ := oras.PushBytes(ctx, mem, artifact.MediaTypeHelmConfig, cfg)
	ldesc, _ := oras.PushBytes(ctx, mem, artifact.MediaTypeHelmChart, tgz)
	mdesc, err := oras.PackManifest(ctx, mem, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{ConfigDescriptor: &cdesc, Layers: []ocispec.Descriptor{ldesc}})
	if err != nil {
		t.Fatal(err)
	}
	_ = mem.Tag(ctx, mdesc, version)
	if _, err := oras.Copy(ctx, mem, version, remoteRepo(t, repoRef+":"+version), version, oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	return mdesc.Digest
}

// create builds the world's package into dir/name.
func create(t testing.TB, w *world, out string) *build.CreateResult {
	t.Helper()
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: out})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res
}

// tarEntry is one entry of an uncompressed archive.
type tarEntry struct {
	Header *tar.Header
	Data   []byte
}

// readTar reads a .tar or .tar.zst whole.
func readTar(t testing.TB, path string) []tarEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader = bytes.NewReader(data)
	if strings.HasSuffix(path, ".zst") {
		dec, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		r = dec
	}
	tr := tar.NewReader(r)
	var out []tarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, tarEntry{h, b})
	}
}

// writeTar writes entries as an uncompressed tar.
func writeTar(t testing.TB, path string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := *e.Header
		h.Size = int64(len(e.Data))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.Data); err != nil && h.Typeflag == tar.TypeReg {
			t.Fatal(err)
		}
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// inRegistry is the registry repository ref names (plain HTTP on
// loopback) and the reference in it, for the verbs that take a target.
func inRegistry(ref string) (*remote.Repository, string, error) {
	repo, err := artifact.RemoteOptions{}.Repository(ref)
	if err != nil {
		return nil, "", err
	}
	return repo, repo.Reference.Reference, nil
}

// verifyRemote verifies the package ref names in its registry.
func verifyRemote(ctx context.Context, ref string, opts artifact.VerifyOptions) (*artifact.VerifyResult, error) {
	repo, tag, err := inRegistry(ref)
	if err != nil {
		return nil, err
	}
	return artifact.Verify(ctx, repo, tag, opts)
}

// inspectRemote reports on the package ref names in its registry.
func inspectRemote(ctx context.Context, ref string) (*artifact.Report, error) {
	repo, tag, err := inRegistry(ref)
	if err != nil {
		return nil, err
	}
	return artifact.Inspect(ctx, repo, tag, nil)
}

// pullRemote pulls the package ref names from its registry into out.
func pullRemote(ctx context.Context, ref, out string, opts artifact.PullOptions) (*artifact.PullResult, error) {
	repo, tag, err := inRegistry(ref)
	if err != nil {
		return nil, err
	}
	return artifact.Pull(ctx, repo, tag, out, opts)
}

// assertPullsBack pulls ref and fails unless its archive is byte for byte
// the one at want; what names the pulled package in the failure.
func assertPullsBack(t testing.TB, ctx context.Context, ref, want, what string) {
	t.Helper()
	pulled := filepath.Join(t.TempDir(), "pulled.tar.zst")
	if _, err := pullRemote(ctx, ref, pulled, artifact.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(want)
	b, _ := os.ReadFile(pulled)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s differs from %s", what, filepath.Base(want))
	}
}
