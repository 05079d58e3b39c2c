package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
)

// countingSource gives packages, counting reads; fail makes reads fail.
type countingSource struct {
	reads atomic.Int32
	mu    sync.Mutex
	cfgs  []*artifact.Config
	fail  error
}

func (s *countingSource) Packages(context.Context) ([]*artifact.Config, error) {
	s.reads.Add(1)
	if s.fail != nil {
		return nil, s.fail
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cfgs), nil
}

// add deploys a package.
func (s *countingSource) add(cfg *artifact.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfgs = append(s.cfgs, cfg)
}

var _ Source = (*countingSource)(nil)

// TestCache: Rewriter reads once and keeps the images for MaxAge; Refresh
// reads again, but not twice within MinInterval; a failed read is an error,
// never the images of before.
func TestCache(t *testing.T) {
	ctx := context.Background()
	src := &countingSource{}
	c := &Cache{Source: src, Registry: host, RequireKnown: true, MaxAge: time.Hour, MinInterval: 50 * time.Millisecond}
	rw, err := c.Rewriter(ctx)
	if err != nil || rw.Registry != host || !rw.RequireKnown {
		t.Fatalf("Rewriter: %+v, %v", rw, err)
	}
	if _, err := rw.Rewrite("docker.io/library/app:1.0"); !errors.Is(err, ErrUnknownImage) {
		t.Fatalf("before the deploy: %v", err)
	}
	// A package is deployed: Rewriter still answers from its cache,
	// Refresh just after the read does not read again, later it does.
	src.add(&artifact.Config{Name: "demo", Components: []artifact.Component{{Images: []artifact.Image{{Ref: "docker.io/library/app:1.0", Digest: appDigest}}}}})
	c.Rewriter(ctx)
	c.Refresh(ctx)
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d reads, want 1", n)
	}
	time.Sleep(60 * time.Millisecond)
	rw, err = c.Refresh(ctx)
	if err != nil || src.reads.Load() != 2 {
		t.Fatalf("Refresh after MinInterval: %d reads, %v", src.reads.Load(), err)
	}
	if got, err := rw.Rewrite("app:1.0"); err != nil || got != host+"/library/app@"+appDigest.String() {
		t.Fatalf("after the refresh: %s, %v", got, err)
	}
	if rw2, _ := c.Rewriter(ctx); rw2 != rw || src.reads.Load() != 2 {
		t.Fatal("Rewriter did not keep what Refresh read")
	}

	time.Sleep(60 * time.Millisecond)
	src.fail = errors.New("API server away")
	if _, err := c.Refresh(ctx); err == nil {
		t.Fatal("a failed read was not an error")
	}
	if _, err := c.Rewriter(ctx); err == nil {
		t.Fatal("after a failed read, Rewriter answered from the old images")
	}
}

// TestCacheMaxAge: images older than MaxAge are read again.
func TestCacheMaxAge(t *testing.T) {
	src := &countingSource{}
	c := &Cache{Source: src, MaxAge: 20 * time.Millisecond}
	c.Rewriter(context.Background())
	c.Rewriter(context.Background())
	time.Sleep(30 * time.Millisecond)
	c.Rewriter(context.Background())
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}
}
