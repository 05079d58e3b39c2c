// Package examples_test creates and inspects every example definition
// under examples/, checks every relative link of the project's Markdown,
// and runs the README's quickstart up to `ferry init`, so that none of them
// rots. The examples name images by their real references
// (docker.io/library/nginx:1.27…); the tests serve generated images under
// those names from an in-process registry that every registry host leads
// to, so nothing leaves the machine.
package examples_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/reference"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"gopkg.in/yaml.v3"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// example says how to test one folder of examples/: what to provide
// before create that the folder cannot hold (a git clone), and what to
// check in the package besides what every example is checked for.
type example struct {
	prepare func(t *testing.T, dir string)
	check   func(t *testing.T, e *created)
}

// created is an example's definition and the package made from it.
type created struct {
	dir    string
	def    *definition.Definition
	pkg    *artifact.Reader
	report *artifact.Report
}

// examples lists every folder of examples/ (TestExamples fails on a folder
// missing here).
var examples = map[string]example{
	"web-app": {check: func(t *testing.T, e *created) {
		c := e.report.Components[0]
		if len(c.Charts) != 1 {
			t.Fatalf("charts: %+v", c.Charts)
		}
		ch := c.Charts[0]
		if ch.Name != "web" || ch.Version != "0.1.0" || ch.Namespace != "web" || ch.ReleaseName != "web" {
			t.Errorf("chart recorded as %+v", ch)
		}
		// The chart runs the image the package carries: its values name
		// the same reference.
		var values struct {
			Image struct{ Repository, Tag string }
		}
		readYAML(t, filepath.Join(e.dir, "charts/web/values.yaml"), &values)
		ref, err := definition.NormalizeImageRef(values.Image.Repository + ":" + values.Image.Tag)
		if err != nil || ref != c.Images[0].Ref {
			t.Errorf("the chart runs %s (%v), the package carries %s", ref, err, c.Images[0].Ref)
		}
		if want := []string{"linux/" + runtime.GOARCH}; !slices.Equal(c.Images[0].Platforms, want) {
			t.Errorf("platforms %v, want the host's %v", c.Images[0].Platforms, want)
		}
	}},
	"images-only": {check: func(t *testing.T, e *created) {
		var n int
		for _, c := range e.report.Components {
			n += len(c.Images)
			if len(c.Charts)+len(c.Manifests)+len(c.Files)+len(c.Repositories) != 0 {
				t.Errorf("component %s holds more than images", c.Name)
			}
		}
		if n != 6 || e.report.Components[1].Required {
			t.Errorf("%d images, optional tools component: %v", n, !e.report.Components[1].Required)
		}
	}},
	"multi-platform": {check: func(t *testing.T, e *created) {
		for _, img := range e.report.Components[0].Images {
			// The upstream index has four platforms; the package keeps two,
			// in a new index.
			if want := []string{"linux/amd64", "linux/arm64/v8"}; !slices.Equal(img.Platforms, want) {
				t.Errorf("%s: platforms %v, want %v", img.Ref, img.Platforms, want)
			}
			if img.MediaType != ocispec.MediaTypeImageIndex || img.Digest == img.OriginalDigest {
				t.Errorf("%s: stored %s %s, upstream %s: want a new index", img.Ref, img.MediaType, img.Digest, img.OriginalDigest)
			}
		}
		if e.def.SBOM.Format != definition.SBOMFormatCycloneDX {
			t.Errorf("sbom format %q", e.def.SBOM.Format)
		}
	}},
	"gitops": {
		prepare: func(t *testing.T, dir string) { fleetRepository(t, filepath.Join(dir, "fleet")) },
		check: func(t *testing.T, e *created) {
			c := e.report.Components[0]
			head := fleetHead(t, filepath.Join(e.dir, "fleet"))
			r := c.Repositories[0]
			if r.URL != "https://github.com/example/fleet.git" || r.Ref != "refs/heads/main" || r.Commit != head ||
				r.Revision != "main@sha1:"+head || !r.History || r.Path != "example/fleet" {
				t.Errorf("repository recorded as %+v (head %s)", r, head)
			}
			// The Flux GitRepository syncs the repository the package carries.
			var src struct {
				Kind string
				Spec struct{ URL string }
			}
			readYAML(t, filepath.Join(e.dir, "flux/gitrepository.yaml"), &src)
			if src.Kind != "GitRepository" || src.Spec.URL != r.URL {
				t.Errorf("the %s names %s, the package carries %s", src.Kind, src.Spec.URL, r.URL)
			}
			if m := c.Manifests[0]; m.Namespace != "flux-system" || len(m.Files) != 2 {
				t.Errorf("manifests recorded as %+v", m)
			}
		},
	},
	"node-files": {check: func(t *testing.T, e *created) {
		var n int
		for ci, c := range e.report.Components {
			for fi, f := range c.Files {
				n++
				fd := e.def.Components[ci].Files[fi]
				if f.Target != fd.Target || f.Mode != fd.Mode {
					t.Errorf("%s recorded as %s %04o, defined as %s %04o", f.Source, f.Target, f.Mode, fd.Target, fd.Mode)
				}
				// The bytes a node takes out of the package (its README's
				// script reads the blob by digest) are the source file's.
				rc, err := e.pkg.Fetch(context.Background(), ocispec.Descriptor{MediaType: artifact.MediaTypeFile, Digest: f.Digest, Size: f.Size})
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(filepath.Join(e.dir, filepath.FromSlash(f.Source)))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: the package holds %d bytes that differ from the source (%v)", f.Target, len(got), err)
				}
			}
		}
		if n != 4 {
			t.Errorf("%d files, want 4", n)
		}
	}},
}

// TestExamples creates every example with ferry's library, as `ferry
// package create` does (without SBOMs: they need the helper binary, which
// the quickstart test runs), and inspects the package: every blob
// verified, and what ferry.json records against the definition.
func TestExamples(t *testing.T) {
	dirs := exampleDirs(t)
	for _, d := range dirs {
		if _, ok := examples[d]; !ok {
			t.Errorf("examples/%s is not tested: add it to the examples table of examples_test.go", d)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(examples)) {
		if !slices.Contains(dirs, name) {
			t.Errorf("the examples table names %s, which is no folder of examples/", name)
		}
	}
	up := newUpstream(t)
	for _, name := range dirs {
		ex, ok := examples[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), name)
			copyDir(t, name, dir)
			if ex.prepare != nil {
				ex.prepare(t, dir)
			}
			def, err := definition.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			up.serve(t, def)
			out := filepath.Join(t.TempDir(), def.Metadata.Name+"-"+def.Metadata.Version+".tar.zst")
			res, err := build.Create(ctx, def, build.CreateOptions{
				Output: out, Remote: up.remote(), Charts: chart.Packager{}, Git: gitrepo.Fetcher{},
			})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			pkg, err := artifact.Open(ctx, out)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := artifact.Inspect(ctx, pkg, "", nil)
			if err != nil {
				t.Fatalf("inspect: %v", err)
			}
			if rep.Root != res.Root.Digest {
				t.Errorf("inspect reads root %s, create wrote %s", rep.Root, res.Root.Digest)
			}
			checkAgainstDefinition(t, def, rep, up)
			checkManifestImages(t, dir, def)
			ex.check(t, &created{dir: dir, def: def, pkg: pkg, report: rep})
		})
	}
}

// checkAgainstDefinition checks what every package must record of its
// definition: name, version, components, their items, and images by the
// digests upstream served, on the definition's platforms only.
func checkAgainstDefinition(t *testing.T, def *definition.Definition, rep *artifact.Report, up *upstream) {
	t.Helper()
	if rep.Name != def.Metadata.Name || rep.Version != def.Metadata.Version {
		t.Errorf("package %s %s, defined as %s %s", rep.Name, rep.Version, def.Metadata.Name, def.Metadata.Version)
	}
	if len(rep.Components) != len(def.Components) {
		t.Fatalf("%d components, %d defined", len(rep.Components), len(def.Components))
	}
	var platforms []string
	for _, p := range def.Platforms {
		platforms = append(platforms, p.OS+"/"+p.Architecture)
	}
	for i, c := range rep.Components {
		cd := def.Components[i]
		if c.Name != cd.Name || c.Required != cd.Required ||
			len(c.Images) != len(cd.Images) || len(c.Charts) != len(cd.Charts) || len(c.Manifests) != len(cd.Manifests) ||
			len(c.Files) != len(cd.Files) || len(c.Repositories) != len(cd.Repositories) {
			t.Errorf("component %d recorded as %+v, defined as %+v", i, c, cd)
			continue
		}
		for j, img := range c.Images {
			if img.Ref != cd.Images[j].Ref || img.OriginalDigest != up.digest(cd.Images[j].Ref) {
				t.Errorf("image %s (%s), defined as %s (upstream %s)", img.Ref, img.OriginalDigest, cd.Images[j].Ref, up.digest(cd.Images[j].Ref))
			}
			if len(img.Platforms) == 0 {
				t.Errorf("%s: no platform kept", img.Ref)
			}
			for _, p := range img.Platforms {
				if !slices.ContainsFunc(platforms, func(want string) bool { return p == want || strings.HasPrefix(p, want+"/") }) {
					t.Errorf("%s: kept %s, not one of the package's platforms %v", img.Ref, p, platforms)
				}
			}
		}
	}
}

var imageLine = regexp.MustCompile(`(?m)^\s*(?:-\s*)?image:\s*"?([^"\s{}]+)"?\s*$`)

// checkManifestImages checks that every image a manifest bundle names is
// an image of its component: the cluster can only run images the package
// carries.
func checkManifestImages(t *testing.T, dir string, def *definition.Definition) {
	t.Helper()
	for _, c := range def.Components {
		var carried []string
		for _, img := range c.Images {
			carried = append(carried, img.Ref)
		}
		for _, m := range c.Manifests {
			for _, f := range m.Files {
				_ = filepath.WalkDir(filepath.Join(dir, f), func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					data, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					for _, match := range imageLine.FindAllSubmatch(data, -1) {
						ref, err := definition.NormalizeImageRef(string(match[1]))
						if err != nil || !slices.Contains(carried, ref) {
							t.Errorf("%s runs %s, which component %s does not carry (%v)", p, match[1], c.Name, err)
						}
					}
					return nil
				})
			}
		}
	}
}

// exampleDirs lists the folders of examples/.
func exampleDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !strings.HasPrefix(e.Name(), "_") && e.Name() != "testdata" {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no example folders")
	}
	return dirs
}

// upstream stands in for the registries the examples name (Docker Hub,
// quay.io, registry.k8s.io…): one in-process registry that a client with
// upstream.remote reaches whatever host it asks for. Each image is served
// under its path without the host, as a four-platform index of generated
// layers.
type upstream struct {
	addr string

	mu      sync.Mutex
	digests map[string]ocispec.Descriptor
}

func newUpstream(t *testing.T) *upstream {
	return &upstream{addr: registrytest.New(t), digests: map[string]ocispec.Descriptor{}}
}

// serve pushes an image for every registry image of def not served yet.
func (u *upstream) serve(t *testing.T, def *definition.Definition) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	platforms := []ocispec.Platform{
		fixture.Platform("linux", "amd64", ""), fixture.Platform("linux", "arm64", "v8"),
		fixture.Platform("linux", "arm", "v7"), fixture.Platform("linux", "s390x", ""),
	}
	for _, c := range def.Components {
		for _, img := range c.Images {
			if img.Layout != "" || u.digests[img.Ref].Digest != "" {
				continue
			}
			named, err := reference.ParseNormalizedNamed(img.Ref)
			if err != nil {
				t.Fatal(err)
			}
			tagged, ok := named.(reference.Tagged)
			if !ok {
				t.Fatalf("%s: the examples name images by tag", img.Ref)
			}
			repo, err := remote.NewRepository(u.addr + "/" + reference.Path(named))
			if err != nil {
				t.Fatal(err)
			}
			repo.PlainHTTP = true
			rng := fixture.Rand(uint64(len(u.digests) + 1))
			desc, err := fixture.MultiPlatformImage(t.Context(), repo, rng, platforms, nil, 1, 4<<10)
			if err != nil {
				t.Fatalf("serve %s: %v", img.Ref, err)
			}
			if err := repo.Tag(t.Context(), desc, tagged.Tag()); err != nil {
				t.Fatal(err)
			}
			u.digests[img.Ref] = desc
		}
	}
}

// digest is the digest upstream serves ref by.
func (u *upstream) digest(ref string) digest.Digest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.digests[ref].Digest
}

// remote is how create reaches upstream: every registry host leads to
// the in-process registry, over plain HTTP, anonymously (the machine's
// docker config is not read).
func (u *upstream) remote() artifact.RemoteOptions {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	transport := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, u.addr)
	}}
	return artifact.RemoteOptions{
		PlainHTTP:  true,
		Client:     &http.Client{Transport: transport},
		Credential: func(context.Context, string) (auth.Credential, error) { return auth.EmptyCredential, nil },
	}
}

// fleetRepository makes the git repository the gitops example reads from
// its folder: two commits on main (go-git: no git binary needed).
func fleetRepository(t *testing.T, dir string) {
	t.Helper()
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for i, files := range []map[string]string{
		{"clusters/prod/kustomization.yaml": "resources: [../../apps/web]\n", "apps/web/kustomization.yaml": "resources: [deploy.yaml]\n",
			"apps/web/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"},
		{"README.md": "The fleet: what runs in each cluster.\n"},
	} {
		for rel, body := range files {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := wt.Add(rel); err != nil {
				t.Fatal(err)
			}
		}
		sig := &object.Signature{Name: "fleet", Email: "fleet@example.com", When: time.Date(2025, 6, 1+i, 12, 0, 0, 0, time.UTC)}
		if _, err := wt.Commit("fleet, step "+string(rune('1'+i)), &git.CommitOptions{Author: sig, Committer: sig}); err != nil {
			t.Fatal(err)
		}
	}
}

// fleetHead is the commit main names in the repository at dir.
func fleetHead(t *testing.T, dir string) string {
	t.Helper()
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		t.Fatal(err)
	}
	return ref.Hash().String()
}

// copyDir copies the folder src to dst, keeping file modes.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
