package registry

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// Read-only maintenance: distribution refuses uploads, manifest PUTs and
// deletes while storage.maintenance.readonly is enabled, and keeps serving
// pulls. That setting is read once, when an App is built, and holds for one
// process; ferry makes it a shared switch. A flag object on the storage says
// "read-only"; every Server on that storage (replicas, processes on one
// bucket) looks at it every MaintenancePoll and, when it changed, builds a
// distribution App with the new setting and swaps it in. Requests in flight
// finish on the App they started on.
//
// A garbage collection sets the flag, waits until every Server has seen it
// and its writes in flight have ended, sweeps, and clears it. Leaving
// read-only mode also starts a fresh App, and with it a fresh blob
// descriptor cache: nothing swept stays cached as present.

// readOnlyFlag is the flag object's path on the storage.
const readOnlyFlag = "/ferry/maintenance/read-only"

// DefaultMaintenancePoll is how often a Server looks at the read-only flag
// when Config.MaintenancePoll is zero.
const DefaultMaintenancePoll = 2 * time.Second

// SetReadOnly sets (on) or clears the read-only flag on cfg's storage.
// Every Server on that storage follows within its MaintenancePoll.
func SetReadOnly(ctx context.Context, cfg Config, on bool) error {
	d, err := cfg.openDriver(ctx)
	if err != nil {
		return err
	}
	return setReadOnlyFlag(ctx, d, on)
}

func setReadOnlyFlag(ctx context.Context, d storagedriver.StorageDriver, on bool) error {
	if on {
		stamp := time.Now().UTC().Format(time.RFC3339) + "\n"
		if err := d.PutContent(ctx, readOnlyFlag, []byte(stamp)); err != nil {
			return fmt.Errorf("read-only maintenance flag: %w", err)
		}
		return nil
	}
	if err := d.Delete(ctx, readOnlyFlag); err != nil && !notFound(err) {
		return fmt.Errorf("read-only maintenance flag: %w", err)
	}
	return nil
}

// openRegistry opens the driver of cfg's storage (not in-memory: only a
// storage that registries share can be put in maintenance mode) and checks
// that it holds a registry. what names the operation in errors.
func openRegistry(ctx context.Context, cfg Config, what string) (storagedriver.StorageDriver, error) {
	if cfg.RootDir == "" && cfg.S3 == nil {
		return nil, fmt.Errorf("%s: in-memory storage is not shared", what)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := cfg.openDriver(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := d.Stat(ctx, "/docker"); err != nil {
		return nil, fmt.Errorf("%s: no registry storage: %w", what, err)
	}
	return d, nil
}

// settleTime is opts.Settle, or twice DefaultMaintenancePoll plus a second.
func settleTime(opts GCOptions) time.Duration {
	if opts.Settle > 0 {
		return opts.Settle
	}
	return 2*DefaultMaintenancePoll + time.Second
}

// sleep waits d, or less when ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// enterReadOnly sets the read-only flag on d and waits settle, until every
// registry on the storage follows it. leave clears the flag and waits
// settle again, so that when it returns every registry takes pushes (once:
// later calls do nothing), also after ctx ended.
func enterReadOnly(ctx context.Context, d storagedriver.StorageDriver, settle time.Duration) (leave func() error, err error) {
	if err := setReadOnlyFlag(ctx, d, true); err != nil {
		return nil, err
	}
	var once sync.Once
	leave = func() error {
		var err error
		once.Do(func() {
			if err = setReadOnlyFlag(context.WithoutCancel(ctx), d, false); err == nil {
				// When leave returns, every registry takes pushes again.
				err = sleep(context.WithoutCancel(ctx), settle)
			}
		})
		return err
	}
	if err := sleep(ctx, settle); err != nil {
		_ = leave()
		return nil, err
	}
	return leave, nil
}

// readOnlyFlagSet reports whether the flag is on the storage.
func readOnlyFlagSet(ctx context.Context, d storagedriver.StorageDriver) (bool, error) {
	_, err := d.Stat(ctx, readOnlyFlag)
	switch {
	case err == nil:
		return true, nil
	case notFound(err):
		return false, nil
	default:
		return false, err
	}
}

// appSwitch serves every request through the current distribution App.
type appSwitch struct {
	ctx  context.Context
	base *configuration.Configuration // without storage.maintenance.readonly
	log  *slog.Logger

	mu  sync.Mutex // serializes swaps
	cur atomic.Pointer[appState]
}

type appState struct {
	app      *handlers.App
	readOnly bool
}

func (a *appSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// distribution reads the API's parameters (digest, mount, from,
	// _state) with FormValue, which parses a form body first: 10 MiB
	// read into memory, before the credentials are checked. They are in
	// the query only.
	r.Form, r.PostForm = r.URL.Query(), url.Values{}
	a.cur.Load().app.ServeHTTP(w, r)
}

// set makes the current App read-only or not, building a new one when that
// changes. The first call builds the first App.
func (a *appSwitch) set(readOnly bool) (err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.cur.Load()
	if old != nil && old.readOnly == readOnly {
		return nil
	}
	cfg := *a.base
	cfg.Storage = maps.Clone(a.base.Storage)
	maint := maps.Clone(a.base.Storage["maintenance"])
	if maint == nil {
		maint = configuration.Parameters{}
	}
	maint["readonly"] = map[any]any{"enabled": readOnly}
	cfg.Storage["maintenance"] = maint
	defer func() {
		// handlers.NewApp panics on a configuration it can not use.
		if r := recover(); r != nil {
			err = fmt.Errorf("registry: configure distribution: %v", r)
		}
	}()
	app := handlers.NewApp(a.ctx, &cfg)
	a.cur.Store(&appState{app: app, readOnly: readOnly})
	if old != nil {
		_ = old.app.Shutdown()
		a.log.Info("registry maintenance mode", "read-only", readOnly)
	}
	return nil
}

func (a *appSwitch) readOnly() bool { return a.cur.Load().readOnly }

func (a *appSwitch) shutdown() error { return a.cur.Load().app.Shutdown() }

// follow looks at the read-only flag on d every poll until ctx ends.
func (a *appSwitch) follow(ctx context.Context, d storagedriver.StorageDriver, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		on, err := readOnlyFlagSet(ctx, d)
		if err != nil {
			a.log.Warn("read-only maintenance flag", "error", err)
			continue
		}
		if err := a.set(on); err != nil {
			a.log.Error("registry maintenance mode", "error", err)
		}
	}
}

// httpSecretPath holds the HTTP secret that registries on one shared
// storage sign upload state with, when none is configured: an upload
// started on one replica then continues on another.
const httpSecretPath = "/ferry/http-secret"

// sharedHTTPSecret reads the storage's HTTP secret, making one when there
// is none. Two registries starting at once may both write one; each reads
// back after a pause, so both use the one written last.
func sharedHTTPSecret(ctx context.Context, d storagedriver.StorageDriver) (string, error) {
	b, err := d.GetContent(ctx, httpSecretPath)
	if err == nil && len(b) > 0 {
		return string(b), nil
	}
	if err != nil && !notFound(err) {
		return "", fmt.Errorf("registry: HTTP secret: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", fmt.Errorf("registry: HTTP secret: %w", err)
	}
	if err := d.PutContent(ctx, httpSecretPath, fmt.Appendf(nil, "%x", secret)); err != nil {
		return "", fmt.Errorf("registry: HTTP secret: %w", err)
	}
	time.Sleep(500 * time.Millisecond)
	b, err = d.GetContent(ctx, httpSecretPath)
	if err != nil {
		return "", fmt.Errorf("registry: HTTP secret: %w", err)
	}
	return string(b), nil
}
