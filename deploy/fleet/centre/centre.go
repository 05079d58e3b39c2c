// Package centre is the fleet's centre, `ferry fleet serve`
// (docs/design/fleet.md): the HTTPS endpoint members dial out to (join,
// sync, bundle: package wire) and the rollout engine, over the fleet's
// objects (fleet.ferry.dev/v1alpha1) in a namespace of the management
// cluster. Its state is those objects, join tokens (Secrets of type
// TokenSecretType), its CA (the Secret CASecretName) and members' receipts,
// kept as blobs in the centre's registry. It holds no credential to any
// member: members ask, and it answers each with its own desired state
// only.
//
// A Centre is a struct whose fields are its options (Helm's pkg/action
// shape); Handler serves members, Run keeps rollouts moving, and the other
// methods are the verbs `ferry fleet` gives a person: tokens, revoking,
// promoting, rolling back, importing a carried member's report and writing
// its bundle.
package centre

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/authlimit"
)

// DefaultNamespace is where the fleet's objects live when Centre.Namespace
// is empty.
const DefaultNamespace = "ferry-fleet"

// Annotations the centre reads and writes on the fleet's objects.
const (
	// AnnotationBy, on a ReleaseTrack or a Placement, names who asked for
	// its last change (Promote and Rollback set it; `kubectl annotate` may):
	// a rollout's history records it.
	AnnotationBy = "fleet.ferry.dev/by"
	// AnnotationRollback, on a Placement, is the digest Rollback pinned: a
	// rollout to it is recorded as a rollback and goes to every member at
	// once.
	AnnotationRollback = "fleet.ferry.dev/rollback"
)

// Defaults of a Centre and of the rollout strategy.
const (
	// DefaultCanaries go first when no member is labelled a canary.
	DefaultCanaries = 1
	// DefaultWaveFraction is the percentage of the members a later wave
	// takes.
	DefaultWaveFraction = 25
	// DefaultReadyTimeout bounds the wait for each member of a wave.
	DefaultReadyTimeout = 10 * time.Minute
	// StaleAfter heartbeats without a report make a connected member Stale.
	StaleAfter = 3
	// DefaultParallelBundles bundle requests are read and their deltas
	// made at once; more wait. Sending a made bundle takes no slot.
	DefaultParallelBundles = 2
	// DefaultStallTimeout is Centre.StallTimeout's default.
	DefaultStallTimeout = time.Minute
	// MaxHistory and MaxPromotions bound what a Placement's and a
	// ReleaseTrack's status keep.
	MaxHistory    = 20
	MaxPromotions = 50
)

// Errors a caller may tell apart (errors.Is).
var (
	// ErrNotFound: the member, track or placement named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrRevoked: the member is revoked.
	ErrRevoked = errors.New("the member is revoked")
	// ErrToken: a join token is unknown, wrong, expired or used up.
	ErrToken = errors.New("the join token is refused")
	// ErrReplay: an imported report is not newer than the member's last.
	ErrReplay = errors.New("the report is not newer than the member's last report")
)

// Centre is the fleet's centre. Client is required; the zero value of
// every other field works.
type Centre struct {
	// Client reads and writes the fleet's objects and Secrets in the
	// management cluster (a scheme with core and fleet.ferry.dev/v1alpha1).
	// For a large fleet, a cache-backed client (controller-runtime's
	// cluster.GetClient): every request reads its Member, and every sync
	// the groups, tracks and placements.
	Client client.Client
	// APIReader reads what must be fresh where Client may be a cache: a
	// join token's uses (taken with optimistic concurrency) and an object
	// read again after a conflicting write. Client if nil.
	APIReader client.Reader
	// Namespace holds the fleet's objects; DefaultNamespace if empty.
	Namespace string
	// Registry is the centre's registry (host[:port]): the tracks'
	// repositories, and the members' receipts under ferry-fleet/receipts.
	Registry string
	// Remote says how to reach Registry.
	Remote artifact.RemoteOptions
	// Spool holds the packages pulled by digest (a cache, kept) and the
	// bundles being written (removed once sent); a folder ferry-fleet in
	// os.TempDir() if empty.
	Spool string
	// Interval is the members' heartbeat; wire.DefaultInterval if 0.
	Interval time.Duration
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// StallTimeout bounds a member's silence: a join's or sync's body
	// not in within it, a bundle request's body or a bundle's answer that
	// makes no progress for it, is cut off. DefaultStallTimeout if ≤ 0.
	StallTimeout time.Duration
	// Logger receives a line per request refused or served (syncs at
	// Debug) and per rollout step; nil discards.
	Logger *slog.Logger

	once       sync.Once
	tokenLocks [tokenStripes]sync.Mutex // by token id (tokenLock)
	guesses    *authlimit.Limiter
	inFlight   sync.Map // endpoint and member → struct{} (only)
	kicks      chan struct{}
	pulls      singleflight.Group
	bundles    chan struct{}
}

func (c *Centre) init() {
	c.once.Do(func() {
		c.kicks = make(chan struct{}, 1)
		c.bundles = make(chan struct{}, DefaultParallelBundles)
		c.guesses = authlimit.New(authlimit.Options{Now: c.now})
	})
}

func (c *Centre) fresh() client.Reader {
	if c.APIReader != nil {
		return c.APIReader
	}
	return c.Client
}

func (c *Centre) ns() string {
	if c.Namespace == "" {
		return DefaultNamespace
	}
	return c.Namespace
}

func (c *Centre) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Centre) interval() time.Duration {
	if c.Interval <= 0 {
		return wire.DefaultInterval
	}
	return c.Interval
}

func (c *Centre) stall() time.Duration {
	if c.StallTimeout <= 0 {
		return DefaultStallTimeout
	}
	return c.StallTimeout
}

func (c *Centre) log() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

func (c *Centre) spool() string {
	if c.Spool == "" {
		return filepath.Join(os.TempDir(), "ferry-fleet")
	}
	return c.Spool
}

// kick asks Run for a pass now (a report changed, a version moved).
func (c *Centre) kick() {
	c.init()
	select {
	case c.kicks <- struct{}{}:
	default:
	}
}

// Run reconciles every second, and as soon as a member's report or a
// verb changes something, until ctx ends; it returns nil then. A failed
// pass is logged and tried again at the next.
func (c *Centre) Run(ctx context.Context) error {
	c.init()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
			c.log().Warn("fleet reconcile", "error", oneLine(err.Error()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-c.kicks:
		}
	}
}

// key names an object of the fleet's namespace.
func (c *Centre) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: c.ns(), Name: name}
}

// member reads a Member; a missing one is ErrNotFound.
func (c *Centre) member(ctx context.Context, name string) (*v1alpha1.Member, error) {
	var m v1alpha1.Member
	if err := c.Client.Get(ctx, c.key(name), &m); err != nil {
		return nil, notFound(err, "member "+name, "member %s is not in the fleet", name)
	}
	return &m, nil
}
