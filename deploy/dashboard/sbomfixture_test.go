package dashboard

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	orasregistry "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sbomexectest.Cleanup()
	os.Exit(code)
}

// sbomImage is an image of a test package and how its SBOM is made.
type sbomImage struct {
	ref       string
	platforms []string // linux/ARCH
	push      func(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error)
	// doc, if set, is the SBOM create records instead of the helper's:
	// given the helper's, it returns the one to carry.
	doc func(real []byte) []byte
}

// generator runs the real ferry-sbom helper (Syft), then lets an image's
// doc replace what it wrote.
type generator struct {
	real build.SBOMGenerator
	docs map[string]func([]byte) []byte
}

func (g generator) GenerateSBOM(ctx context.Context, src content.Fetcher, req build.SBOMRequest) ([]byte, error) {
	doc, err := g.real.GenerateSBOM(ctx, src, req)
	if err != nil {
		return nil, err
	}
	if f := g.docs[req.Ref]; f != nil {
		doc = f(doc)
	}
	return doc, nil
}

var goBinary struct {
	once sync.Once
	data []byte
	err  error
}

// helloImage is the SBOM fixture image: a dpkg status of two packages, a
// Debian os-release and a Go binary with build info.
func helloImage(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error) {
	goBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-gobin-")
		if err != nil {
			goBinary.err = err
			return
		}
		defer os.RemoveAll(dir)
		goBinary.data, goBinary.err = fixture.GoBinary(ctx, dir, "amd64")
	})
	if goBinary.err != nil {
		return ocispec.Descriptor{}, goBinary.err
	}
	return fixture.SBOMImage(ctx, dst, p, goBinary.data)
}

// sbomEnv is a dashboard whose cluster holds one Package, "ferry/demo", in
// a real in-process registry, its SBOMs made by the real helper.
type sbomEnv struct {
	base string
	c    *http.Client
	srv  *Server
	repo orasregistry.Repository
	cfg  *artifact.Config
	pkg  *v1alpha1.Package
}

// startSBOMs creates a package of images with format's SBOMs, pushes it
// into a registry, and serves a dashboard whose cluster's Package points
// at it.
func startSBOMs(t testing.TB, format definition.SBOMFormat, images ...sbomImage) *sbomEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	real, err := sbomexectest.Generator()
	if err != nil {
		t.Fatal(err)
	}
	real.TempDir = t.TempDir()
	gen := generator{real: real, docs: map[string]func([]byte) []byte{}}
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: demo, version: 1.0.0}\nplatforms: [linux/amd64, linux/arm64]\n"
	if format != "" {
		def += "sbom: {format: " + string(format) + "}\n"
	}
	def += "components:\n  - name: base\n    images:\n"
	for i, img := range images {
		var ms []ocispec.Descriptor
		for _, pl := range img.platforms {
			p := fixture.Platform("linux", pl[len("linux/"):], "")
			m, err := img.push(ctx, store, p)
			if err != nil {
				t.Fatal(err)
			}
			m.Platform = &p
			ms = append(ms, m)
		}
		desc := ms[0]
		if len(ms) > 1 {
			if desc, err = fixture.PushIndex(ctx, store, ms); err != nil {
				t.Fatal(err)
			}
		}
		tag := "img" + string(rune('a'+i))
		if err := store.Tag(ctx, desc, tag); err != nil {
			t.Fatal(err)
		}
		def += "      - {ref: " + img.ref + ", layout: images, tag: " + tag + "}\n"
		if img.doc != nil {
			gen.docs[img.ref] = img.doc
		}
	}
	if err := os.WriteFile(filepath.Join(dir, definition.FileName), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build.Create(ctx, d, build.CreateOptions{SBOM: gen, Output: filepath.Join(t.TempDir(), "demo.tar")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, res.Path)
	if err != nil {
		t.Fatal(err)
	}

	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	reg, err := remote.NewRegistry(host)
	if err != nil {
		t.Fatal(err)
	}
	reg.PlainHTTP = true
	repo, err := reg.Repository(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Copy(ctx, r, "", repo, "1.0.0", artifact.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	pkg := &v1alpha1.Package{}
	pkg.Namespace, pkg.Name = "ferry", "demo"
	pkg.Spec = v1alpha1.PackageSpec{Repository: "demo", Digest: res.Root.Digest.String()}
	pkg.Status.Digest, pkg.Status.Version = res.Root.Digest.String(), "1.0.0"

	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Clusters: []Cluster{unreachable()}, Namespace: "ferry", Hosts: HostsFor(ts.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The cluster's actor: its Package client and its way to the
	// registry (the real one, reached as a NodePort would be).
	srv.actors["lab\x00"] = &actor{cluster: "lab", cs: kubefake.NewClientset(),
		pc:  fake.NewClientBuilder().WithScheme(scheme).WithObjects(pkg).WithStatusSubresource(pkg).Build(),
		reg: reg, ep: &reach.Endpoint{Host: host, Via: reach.NodePort}}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(func() { _ = srv.Close() })
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &sbomEnv{base: ts.URL, c: c, srv: srv, repo: repo, cfg: res.Config, pkg: pkg}
}

// sbomOf is the SBOM record of image ref on platform.
func (e *sbomEnv) sbomOf(t testing.TB, ref, platform string) artifact.SBOM {
	t.Helper()
	for _, c := range e.cfg.Components {
		for _, img := range c.Images {
			for _, s := range img.SBOMs {
				if img.Ref == ref && s.Platform == platform {
					return s
				}
			}
		}
	}
	t.Fatalf("no SBOM of %s (%s)", ref, platform)
	return artifact.SBOM{}
}

// page is the path of the package's SBOM s.
func (e *sbomEnv) page(s artifact.SBOM) string {
	return "/c/lab/packages/ferry/demo/sboms/" + s.Digest.String()
}
