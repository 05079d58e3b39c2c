package bomscan_test

import (
	"context"
	"errors"
	"testing"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// memPin is a Pin in memory; err, if set, is every Get's and Set's.
type memPin struct {
	d   digest.Digest
	err error
}

func (p *memPin) Get(context.Context) (digest.Digest, error) { return p.d, p.err }
func (p *memPin) Set(_ context.Context, d digest.Digest) error {
	if p.err != nil {
		return p.err
	}
	p.d = d
	return nil
}

// TestPinnedStore: a pinned store reads the index it pinned, not the one
// the tag names (a forged index pushed over it hides nothing); a user who
// may not read the pin gets the answers, a save error and nothing pushed;
// a pin naming what is not there loads as no index.
func TestPinnedStore(t *testing.T) {
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
	r, err := artifact.Open(ctx, bomscantest.Package(t, "sboms", "1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, "libferry1")

	// Unreadable pin: answers, a save error, no index pushed.
	denied := &memPin{err: errors.New("configmaps is forbidden")}
	var saveErr error
	s := &bomscan.Scanner{Source: bomscan.PackageSource(r, ""), Store: bomscan.PinnedStore(repo, bomscan.IndexTag, denied), OnSaveError: func(err error) { saveErr = err }}
	if hits, err := s.Query(ctx, q); err != nil || len(hits) != 3 || saveErr == nil {
		t.Fatalf("pin denied: %v, %d hits, save error %v", err, len(hits), saveErr)
	}
	if _, err := repo.Resolve(ctx, bomscan.IndexTag); !errors.Is(err, errdef.ErrNotFound) {
		t.Fatalf("a save whose pin cannot be read pushed an index: %v", err)
	}

	pin := &memPin{}
	src := &counting{Source: bomscan.PackageSource(r, "")}
	s = &bomscan.Scanner{Source: src, Store: bomscan.PinnedStore(repo, bomscan.IndexTag, pin)}
	if hits, err := s.Query(ctx, q); err != nil || len(hits) != 3 || pin.d == "" {
		t.Fatalf("first: %v, %d hits, pin %q", err, len(hits), pin.d)
	}
	pinned := pin.d
	// Forged: every SBOM of the index said to hold nothing, under the tag.
	forged := bom.NewIndex()
	idx, err := bomscan.PinnedStore(repo, bomscan.IndexTag, pin).Load(ctx)
	if err != nil || idx.Len() != 3 {
		t.Fatalf("the pinned index: %v", err)
	}
	idx.Each(func(d digest.Digest, _ []bom.Component) bool { forged.Add(d, nil); return true })
	if err := bomscan.RepositoryStore(repo, bomscan.IndexTag).Save(ctx, forged); err != nil {
		t.Fatal(err)
	}
	src.fetched.Store(0)
	if hits, err := s.Query(ctx, q); err != nil || len(hits) != 3 || src.fetched.Load() != 0 || pin.d != pinned {
		t.Fatalf("after the forgery: %v, %d hits, %d SBOMs read, pin moved %v", err, len(hits), src.fetched.Load(), pin.d != pinned)
	}
	// A pin naming nothing the registry holds, or no digest: no index.
	for _, d := range []digest.Digest{digest.FromString("gone"), "sha256:zz", "x\x1b[31m"} {
		pin.d = d
		src.fetched.Store(0)
		if hits, err := s.Query(ctx, q); err != nil || len(hits) != 3 || src.fetched.Load() != 3 {
			t.Fatalf("pin %q: %v, %d hits, %d SBOMs read", d, err, len(hits), src.fetched.Load())
		}
	}
}
