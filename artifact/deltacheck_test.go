package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// held asks repo for each of descs (HEAD) and returns the digests it holds.
func held(t testing.TB, repo *remote.Repository, descs []ocispec.Descriptor) []digest.Digest {
	t.Helper()
	var out []digest.Digest
	for _, d := range descs {
		ok, err := repo.Exists(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out = append(out, d.Digest)
		}
	}
	return out
}

// rewriteDelta writes a copy of the delta archive at path (a .tar) with its
// ferry-delta.json edited.
func rewriteDelta(t testing.TB, path string, edit func(*artifact.DeltaInfo)) string {
	t.Helper()
	entries := readTar(t, path)
	for i, e := range entries {
		if e.Header.Name != "ferry-delta.json" {
			continue
		}
		var info artifact.DeltaInfo
		if err := json.Unmarshal(e.Data, &info); err != nil {
			t.Fatal(err)
		}
		edit(&info)
		data, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		h := *e.Header
		h.Size = int64(len(data))
		entries[i] = tarEntry{&h, data}
	}
	out := filepath.Join(t.TempDir(), "edited.tar")
	writeTar(t, out, entries)
	return out
}

// descriptors lists a receipt's blobs as descriptors, the root's as an
// index.
func descriptors(rc *artifact.Receipt, root ocispec.Descriptor) []ocispec.Descriptor {
	var out []ocispec.Descriptor
	for d, size := range rc.Blobs {
		mt := "application/octet-stream"
		if d == root.Digest {
			mt = root.MediaType
		}
		out = append(out, ocispec.Descriptor{MediaType: mt, Digest: d, Size: size})
	}
	slices.SortFunc(out, func(a, b ocispec.Descriptor) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	return out
}

// TestDeltaFromAnotherRepository: blobs a delta leaves out that the
// destination repository lacks but another repository of the registry
// holds (an image another package brought) are looked for there only when
// the user names it (MountFrom); otherwise the delta is refused, and
// nothing is mounted into the destination.
func TestDeltaFromAnotherRepository(t *testing.T) {
	ctx := context.Background()
	pair := makeDeltaPair(t, 16<<10, nil)
	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	if _, err := artifact.Push(ctx, openPkg(t, pair.V1), host+"/app:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Push(ctx, openPkg(t, pair.V2), host+"/other:2.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := artifact.HaveRegistry(ctx, registryOf(t, host), host, "")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "update.tar.zst")
	res, err := artifact.Delta(ctx, openPkg(t, pair.V2), rc, out, artifact.DeltaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CarriedSize > 4<<10 {
		t.Fatalf("the delta carries %d bytes: the registry holds all of v2", res.CarriedSize)
	}
	app := remoteRepo(t, host+"/app")
	omitted := openPkg(t, out).Delta().Omitted
	before := held(t, app, omitted)
	if len(before) == len(omitted) {
		t.Fatal("app holds everything the delta leaves out: nothing to take from another repository")
	}

	// Not named: refused, nothing mounted.
	_, err = artifact.Push(ctx, openPkg(t, out), host+"/app:2.0.0", artifact.PushOptions{})
	var me *artifact.MissingBlobsError
	if !errors.As(err, &me) || len(me.Missing) != len(omitted)-len(before) || me.Source != "" {
		t.Fatalf("push without naming the other repository: %v", err)
	}
	if after := held(t, app, omitted); !slices.Equal(before, after) {
		t.Fatalf("app held %d of the blobs left out, then %d after the refusal", len(before), len(after))
	}
	if _, err := app.Resolve(ctx, "2.0.0"); err == nil {
		t.Fatal("2.0.0 tagged after a refused delta")
	}

	// Named: taken from there, verified, complete.
	if _, err := artifact.Push(ctx, openPkg(t, out), host+"/app:2.0.0", artifact.PushOptions{MountFrom: "other"}); err != nil {
		t.Fatal(err)
	}
	assertPullsBack(t, ctx, host+"/app:2.0.0", pair.V2, "v2 completed from another repository")
}

// blobReads serves a registry and records the paths of the blobs read
// from it (GET …/blobs/…).
type blobReads struct {
	mu    sync.Mutex
	paths []string
}

func (b *blobReads) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.paths
	b.paths = nil
	return out
}

func newCountingRegistry(t *testing.T) (string, *blobReads) {
	t.Helper()
	srv, err := registry.New(context.Background(), registry.Config{RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	reads := &blobReads{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
			reads.mu.Lock()
			reads.paths = append(reads.paths, r.URL.Path)
			reads.mu.Unlock()
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.Close()
		_ = srv.Shutdown(context.Background())
	})
	return registrytest.Host(ts), reads
}

// TestDeltaListingAnotherPackage: a delta whose ferry-delta.json also lists
// another package of the registry — its root index and every blob — is
// refused before anything is written: without a source named, as missing;
// with that package's repository named as the source, by the graph check,
// before a blob is read from there (only its root index, as a manifest),
// mounted, or one of the delta's own uploaded. The destination holds after
// the refusal exactly what it held before.
func TestDeltaListingAnotherPackage(t *testing.T) {
	ctx := context.Background()
	pair := makeDeltaPair(t, 16<<10, nil)
	host, reads := newCountingRegistry(t)
	if _, err := artifact.Push(ctx, openPkg(t, pair.V1), host+"/app:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := smallPackage(t, filepath.Join(t.TempDir(), "secret.tar.zst"), 64<<10)
	if _, err := artifact.Push(ctx, openPkg(t, secret.Path), host+"/secret:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := descriptors(have(t, secret.Path), secret.Root)
	delta := filepath.Join(t.TempDir(), "update.tar")
	if _, err := artifact.Delta(ctx, openPkg(t, pair.V2), have(t, pair.V1), delta, artifact.DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	hostile := rewriteDelta(t, delta, func(d *artifact.DeltaInfo) { d.Omitted = append(d.Omitted, theirs...) })
	var ours []ocispec.Descriptor
	for _, d := range blobEntries(t, delta) {
		ours = append(ours, ocispec.Descriptor{MediaType: "application/octet-stream", Digest: d})
	}
	app := remoteRepo(t, host+"/app")
	if got := held(t, app, theirs); len(got) != 0 {
		t.Fatalf("app holds %d of secret's blobs before the delta", len(got))
	}
	ownBefore := held(t, app, ours)
	if len(ownBefore) == len(ours) {
		t.Fatal("app holds every blob the delta carries: an upload would go unseen")
	}
	for _, tc := range []struct {
		name  string
		from  string
		check func(error) bool
	}{
		{"no source named", "", func(err error) bool {
			var me *artifact.MissingBlobsError
			return errors.As(err, &me) && len(me.Missing) == len(theirs)
		}},
		{"its repository named as the source", "secret", func(err error) bool {
			return errors.Is(err, artifact.ErrCorrupt) && strings.Contains(err.Error(), "ferry-delta.json lists blob") && strings.Contains(err.Error(), "which the package does not reference")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads.take()
			_, err := artifact.Push(ctx, openPkg(t, hostile), host+"/app:2.0.0", artifact.PushOptions{MountFrom: tc.from})
			if !tc.check(err) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("push: %v", err)
			}
			for _, p := range reads.take() {
				if strings.HasPrefix(p, "/v2/secret/") {
					t.Errorf("read %s before the refusal", p)
				}
			}
			if got := held(t, app, theirs); len(got) != 0 {
				t.Fatalf("after the refusal app holds %d of secret's blobs: %v", len(got), got)
			}
			if got := held(t, app, ours); !slices.Equal(got, ownBefore) {
				t.Fatalf("after the refusal app holds %d of the delta's own blobs, %d before", len(got), len(ownBefore))
			}
			if _, err := app.Resolve(ctx, "2.0.0"); err == nil {
				t.Fatal("2.0.0 tagged after a refused delta")
			}
		})
	}
}

// manyRepositories fills the registry at host with n repositories, each
// holding one empty image index.
func manyRepositories(t testing.TB, host string, n int) {
	t.Helper()
	ctx := context.Background()
	data := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: digest.FromBytes(data), Size: int64(len(data))}
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			repo, err := remote.NewRepository(fmt.Sprintf("%s/team%04d/app", host, i))
			if err != nil {
				return err
			}
			repo.PlainHTTP = true
			return repo.PushReference(ctx, desc, bytes.NewReader(data), "1")
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// manyMissingDelta writes a delta (a .tar) of a small package whose
// ferry-delta.json lists n blobs, none of them anywhere.
func manyMissingDelta(t testing.TB, n int) string {
	t.Helper()
	pair := makeDeltaPair(t, 4<<10, nil)
	delta := filepath.Join(t.TempDir(), "update.tar")
	if _, err := artifact.Delta(context.Background(), openPkg(t, pair.V2), have(t, pair.V1), delta, artifact.DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	return rewriteDelta(t, delta, func(d *artifact.DeltaInfo) {
		for i := len(d.Omitted); i < n; i++ {
			d.Omitted = append(d.Omitted, ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromString(fmt.Sprintf("missing %d", i)), Size: 1})
		}
	})
}

// completeMissing pushes the delta at path, listing n blobs that are
// nowhere, into host/app and returns how long its refusal took: a
// MissingBlobsError after the first batch asked for, every blob of it
// missing.
func completeMissing(t testing.TB, host, path string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := artifact.Push(context.Background(), openPkg(t, path), host+"/app:2.0.0", artifact.PushOptions{})
	took := time.Since(start)
	var me *artifact.MissingBlobsError
	if !errors.As(err, &me) || me.Omitted != n || me.Asked >= n || len(me.Missing) != me.Asked {
		t.Fatalf("push of a delta listing %d missing blobs: %v", n, err)
	}
	if want := fmt.Sprintf("the destination lacks %d of the first %d asked for of the %d blobs", me.Asked, me.Asked, n); !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q, want it to say %q", err, want)
	}
	return took
}

// deltaListed is how many blobs the delta of TestDeltaManyMissing and
// BenchmarkDeltaMissing lists (the issue's: 26,000), deltaRepositories how
// many repositories their registry holds.
const (
	deltaListed       = 26_000
	deltaRepositories = 1000
)

// TestDeltaManyMissing: a delta listing 26,000 blobs that are nowhere,
// pushed into a registry of 1,000 repositories, is refused naming them in
// a time that does not grow with the registry (asked in the destination
// only), and nothing is written. (The budget, as a ratio to an empty
// registry, is BenchmarkDeltaMissing's.)
func TestDeltaManyMissing(t *testing.T) {
	host := registrytest.New(t)
	start := time.Now()
	manyRepositories(t, host, deltaRepositories)
	t.Logf("%d repositories made in %s", deltaRepositories, time.Since(start).Round(time.Millisecond))
	before := catalog(t, host)
	if len(before) != deltaRepositories {
		t.Fatalf("%d repositories, want %d", len(before), deltaRepositories)
	}
	took := completeMissing(t, host, manyMissingDelta(t, deltaListed), deltaListed)
	t.Logf("%d blobs listed, %d repositories: refused in %s", deltaListed, deltaRepositories, took.Round(time.Millisecond))
	if took > time.Minute {
		t.Errorf("refused in %s", took)
	}
	if after := catalog(t, host); !slices.Equal(before, after) {
		t.Fatalf("%d repositories before, %d after the refusal", len(before), len(after))
	}
}
