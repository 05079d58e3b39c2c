package bomscan_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	bomscantest.Cleanup()
	os.Exit(code)
}

func query(t *testing.T, s string) bom.Query {
	t.Helper()
	q, err := bom.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// where lists hits as "image platform name version" lines.
func where(hits []bomscan.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Package+" "+h.Version+" "+h.Image+" "+h.Platform+" "+h.Component.Name+" "+h.Component.Version)
	}
	return out
}

// TestPackageSource: a package on disk answers a query with every image
// platform whose SBOM lists the component, named by package, version,
// image and platform; a component no SBOM lists gives no hit.
func TestPackageSource(t *testing.T) {
	ctx := context.Background()
	path := bomscantest.Package(t, "sboms", "1.0.0")
	r, err := artifact.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s := &bomscan.Scanner{Source: bomscan.PackageSource(r, "")}
	hits, err := s.Query(ctx, query(t, "libferry1"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"sboms 1.0.0 " + bomscantest.App + " linux/amd64 libferry1 1.2.3-1",
		"sboms 1.0.0 " + bomscantest.App + " linux/arm64 libferry1 1.2.3-1",
		"sboms 1.0.0 " + bomscantest.One + " linux/amd64 libferry1 1.2.3-1",
	}
	if got := where(hits); !reflect.DeepEqual(got, want) {
		t.Fatalf("hits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, h := range hits {
		if !strings.HasPrefix(h.Component.PURL, "pkg:deb/debian/libferry1@") || len(h.Runs) != 0 || h.SBOM == "" {
			t.Errorf("hit %+v", h)
		}
	}
	hits, err = s.Query(ctx, query(t, fixture.GoModule))
	if err != nil || len(hits) != 3 || hits[0].Component.Type != "golang" {
		t.Errorf("the Go module: %v %+v", err, hits)
	}
	hits, err = s.Query(ctx, query(t, "openssl"))
	if err != nil || len(hits) != 0 {
		t.Errorf("openssl: %v %+v", err, hits)
	}
}

// counting counts the SBOM documents a source's refs fetch.
type counting struct {
	bomscan.Source
	fetched atomic.Int64
}

func (c *counting) SBOMs(ctx context.Context) ([]bomscan.SBOMRef, error) {
	refs, err := c.Source.SBOMs(ctx)
	for i := range refs {
		fetch := refs[i].Fetch
		refs[i].Fetch = func(ctx context.Context) (io.ReadCloser, error) {
			c.fetched.Add(1)
			return fetch(ctx)
		}
	}
	return refs, err
}

// TestRegistryIndex: the SBOMs of every package of a registry (images and
// other artifacts passed over), indexed in the registry; a second scan
// reads no SBOM; a wiped index is rebuilt from the carried SBOMs with the
// same answers; a package deleted from the registry leaves the index.
func TestRegistryIndex(t *testing.T) {
	ctx := context.Background()
	host := registrytest.New(t)
	opts := artifact.RemoteOptions{PlainHTTP: true}
	for _, p := range []struct{ name, ref string }{{"sboms", "/apps/sboms:1.0.0"}, {"other", "/apps/other:2.0.0"}} {
		r, err := artifact.Open(ctx, bomscantest.Package(t, p.name, strings.TrimPrefix(p.ref[strings.LastIndex(p.ref, ":"):], ":")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Push(ctx, r, host+p.ref, artifact.PushOptions{Remote: opts}); err != nil {
			t.Fatal(err)
		}
		// The same root under a second tag is read once.
		if _, err := artifact.Push(ctx, r, host+p.ref[:strings.LastIndex(p.ref, ":")]+":latest", artifact.PushOptions{Remote: opts}); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := remote.NewRegistry(host)
	if err != nil {
		t.Fatal(err)
	}
	reg.PlainHTTP = true
	repo, err := reg.Repository(ctx, bomscan.IndexRepository)
	if err != nil {
		t.Fatal(err)
	}
	src := &counting{Source: bomscan.RegistrySource(reg, "apps")}
	var saveErr error
	s := &bomscan.Scanner{Source: src, Store: bomscan.RepositoryStore(repo, bomscan.IndexTag), OnSaveError: func(err error) { saveErr = err }}
	q := query(t, "libferry1")
	first, err := s.Query(ctx, q)
	if err != nil || saveErr != nil {
		t.Fatal(err, saveErr)
	}
	if len(first) != 6 || src.fetched.Load() != 3 {
		// Both packages hold the same three SBOMs (same images, same
		// helper): three documents, six places.
		t.Fatalf("%d hits, %d SBOMs read:\n%s", len(first), src.fetched.Load(), strings.Join(where(first), "\n"))
	}
	src.fetched.Store(0)
	again, err := s.Query(ctx, q)
	if err != nil || !reflect.DeepEqual(again, first) || src.fetched.Load() != 0 {
		t.Fatalf("second scan: %v; %d SBOMs read; equal %v", err, src.fetched.Load(), reflect.DeepEqual(again, first))
	}

	// Wiped: the tag deleted, the next scan reads every SBOM again.
	desc, err := repo.Resolve(ctx, bomscan.IndexTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Delete(ctx, desc); err != nil {
		t.Fatal(err)
	}
	rebuilt, err := s.Query(ctx, q)
	if err != nil || !reflect.DeepEqual(rebuilt, first) || src.fetched.Load() != 3 {
		t.Fatalf("rebuilt: %v; %d SBOMs read; equal %v", err, src.fetched.Load(), reflect.DeepEqual(rebuilt, first))
	}
	if _, err := repo.Resolve(ctx, bomscan.IndexTag); err != nil {
		t.Errorf("the rebuilt index is not saved: %v", err)
	}
	// --rebuild reads every SBOM, whatever is stored.
	src.fetched.Store(0)
	s.Rebuild = true
	if got, err := s.Query(ctx, q); err != nil || !reflect.DeepEqual(got, first) || src.fetched.Load() != 3 {
		t.Fatalf("Rebuild: %v; %d SBOMs read", err, src.fetched.Load())
	}
	s.Rebuild = false

	// Only the prefix asked for.
	only := &bomscan.Scanner{Source: bomscan.RegistrySource(reg, "apps/other")}
	hits, err := only.Query(ctx, q)
	if err != nil || len(hits) != 3 || hits[0].Package != "other" || hits[0].Version != "2.0.0" {
		t.Fatalf("prefix apps/other: %v\n%s", err, strings.Join(where(hits), "\n"))
	}
}

// TestDamagedIndex: an index that is not one is made again from the SBOMs.
func TestDamagedIndex(t *testing.T) {
	ctx := context.Background()
	host := registrytest.New(t)
	reg, err := remote.NewRegistry(host)
	if err != nil {
		t.Fatal(err)
	}
	reg.PlainHTTP = true
	repo, err := reg.Repository(ctx, bomscan.IndexRepository)
	if err != nil {
		t.Fatal(err)
	}
	// An image where the index should be.
	img, err := fixture.PushImage(ctx, repo, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.FilesLayer([]fixture.File{{Name: "x", Data: []byte("x"), Mode: 0o644}})})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, img, bomscan.IndexTag); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, bomscantest.Package(t, "sboms", "1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &bomscan.Scanner{Source: bomscan.PackageSource(r, ""), Store: bomscan.RepositoryStore(repo, bomscan.IndexTag)}
	hits, err := s.Query(ctx, query(t, "libferry1"))
	if err != nil || len(hits) != 3 {
		t.Fatalf("%v %d hits", err, len(hits))
	}
	if idx, err := bomscan.RepositoryStore(repo, bomscan.IndexTag).Load(ctx); err != nil || idx.Len() != 3 {
		t.Fatalf("the index saved over the damaged one: %v", err)
	}
}

// TestSARIF: a finding is a result of its advisory's rule, at the image.
func TestSARIF(t *testing.T) {
	var b strings.Builder
	f := bomscan.Finding{Location: bomscan.Location{Package: "p", Version: "1", Image: "example.com/a:1", Platform: "linux/amd64", Runs: []string{"ferry/p"}},
		Component: bom.Component{Name: "golang.org/x/net", Version: "v0.11.0", PURL: "pkg:golang/golang.org/x/net@v0.11.0"}}
	f.Match.ID, f.Match.Summary, f.Match.Fixed = "GO-2023-1988", "Improper rendering of text nodes", "0.13.0"
	if err := bomscan.WriteSARIF(&b, []bomscan.Finding{f, f}, time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Version string
		Runs    []struct {
			Tool struct {
				Driver struct{ Rules []struct{ ID string } }
			}
			Results []struct {
				RuleID    string
				Locations []struct {
					PhysicalLocation struct{ ArtifactLocation struct{ URI string } }
				}
			}
			Properties map[string]string
		}
	}
	if err := json.Unmarshal([]byte(b.String()), &log); err != nil {
		t.Fatal(err)
	}
	run := log.Runs[0]
	if log.Version != "2.1.0" || len(run.Tool.Driver.Rules) != 1 || run.Tool.Driver.Rules[0].ID != "GO-2023-1988" || len(run.Results) != 2 ||
		run.Results[0].Locations[0].PhysicalLocation.ArtifactLocation.URI != "example.com/a:1" || run.Properties["databaseDate"] != "2026-11-05T00:00:00Z" {
		t.Fatalf("%s", b.String())
	}
}
