package agent

import (
	"context"
	"sync"
	"time"

	"github.com/ferrypkg/ferry/artifact"
)

// Source gives the configs (ferry.json) of deployed packages, whose images
// and image policies the agent uses; *rollout.State is one.
type Source interface {
	Packages(ctx context.Context) ([]*artifact.Config, error)
}

// Defaults of Cache.
const (
	// DefaultMaxAge is how long Cache trusts the images it read.
	DefaultMaxAge = 30 * time.Second
	// DefaultMinInterval is the least time between two reads of Cache.
	DefaultMinInterval = time.Second
)

// Cache keeps what a Source gives and hands out Rewriters over it, for
// Webhook.Rewriter and Webhook.Refresh. Reads happen in the request that
// needs them; concurrent requests wait for the same read.
type Cache struct {
	// Source is read for the images.
	Source Source
	// Registry and RequireKnown are those of the Rewriters (see Rewriter).
	Registry     string
	RequireKnown bool
	// MaxAge: images read longer ago are read again by Rewriter;
	// DefaultMaxAge if 0, every time if negative.
	MaxAge time.Duration
	// MinInterval: Refresh does not read again within it of the last read;
	// DefaultMinInterval if 0, none if negative.
	MinInterval time.Duration

	mu   sync.Mutex
	rw   *Rewriter
	read time.Time
}

// Rewriter returns a rewriter over the images read less than MaxAge ago,
// reading them first when there are none that recent. A failed read is
// an error: the webhook then refuses Pods rather than guess.
func (c *Cache) Rewriter(ctx context.Context) (*Rewriter, error) {
	return c.get(ctx, c.MaxAge, DefaultMaxAge)
}

// Refresh reads the images again, unless the last read is less than
// MinInterval old, and returns a rewriter over them.
func (c *Cache) Refresh(ctx context.Context) (*Rewriter, error) {
	return c.get(ctx, c.MinInterval, DefaultMinInterval)
}

func (c *Cache) get(ctx context.Context, age, def time.Duration) (*Rewriter, error) {
	if age == 0 {
		age = def
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rw != nil && time.Since(c.read) < age {
		return c.rw, nil
	}
	rw, err := c.load(ctx)
	if err != nil {
		c.rw = nil
		return nil, err
	}
	c.rw, c.read = rw, time.Now()
	return c.rw, nil
}

// load reads the packages once and makes a rewriter over their images
// and image policies.
func (c *Cache) load(ctx context.Context) (*Rewriter, error) {
	cfgs, err := c.Source.Packages(ctx)
	if err != nil {
		return nil, err
	}
	rw := &Rewriter{Registry: c.Registry, Images: Images{}, Policies: Policies{}, RequireKnown: c.RequireKnown}
	for _, cfg := range cfgs {
		if err := rw.Images.Add(cfg); err != nil {
			return nil, err
		}
		if err := rw.Policies.Add(cfg); err != nil {
			return nil, err
		}
	}
	return rw, nil
}

// Invalidate drops what the cache read: the next Rewriter reads again. A
// package removed (or deployed) must not be rewritten to for MaxAge more.
func (c *Cache) Invalidate() {
	c.mu.Lock()
	c.rw = nil
	c.mu.Unlock()
}
