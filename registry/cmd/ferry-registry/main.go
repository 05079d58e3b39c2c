// Command ferry-registry is the lean in-cluster registry: package registry
// (distribution v3 with the referrers API) behind a few flags, without the
// rest of ferry, so its image stays small. `ferry init` builds its image
// and the cluster runs it as the registry Deployment.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ferrypkg/ferry/internal/redact"
	"github.com/ferrypkg/ferry/registry"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-registry:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "gc" {
		return gc(args[1:])
	}
	if len(args) > 0 && args[0] == "probe" {
		return probe(args[1:])
	}
	if len(args) > 0 && args[0] == "migrate" {
		return migrate(args[1:])
	}
	fs := flag.NewFlagSet("ferry-registry", flag.ContinueOnError)
	addr := fs.String("addr", ":5000", "address to listen on")
	storage := storageFlags(fs)
	htpasswd := fs.String("htpasswd", "", "htpasswd file (bcrypt) requiring basic auth; empty: no auth")
	grace := fs.Duration("shutdown-timeout", 25*time.Second, "how long in-flight requests may finish after SIGTERM")
	drainDelay := fs.Duration("drain-delay", 0, "how long to keep accepting requests after SIGTERM, before the shutdown: a Pod's endpoint leaves every node's kube-proxy meanwhile, and with no other replica ready they keep sending to it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := storage()
	if err != nil {
		return err
	}
	cfg.Addr, cfg.HTPasswdFile = *addr, *htpasswd
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.S3 != nil {
		// A replica that can not use its bucket (unreachable, wrong
		// credentials) never becomes ready: it says why and exits.
		if err := registry.CheckStorage(ctx, cfg); err != nil {
			return err
		}
	}
	logger := slog.New(redact.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	srv, err := registry.New(context.WithoutCancel(ctx), cfg, registry.WithLogger(logger))
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	logger.Info("ferry-registry listening", "addr", l.Addr().String(), "storage", storageName(cfg), "auth", *htpasswd != "", "read-only", srv.ReadOnly())
	return srv.ServeUntil(drained(ctx, *drainDelay), l, *grace)
}

// storageEnv and secretEnv name the environment variables the Deployment
// sets (internal/cluster's StorageEnv and HTTPSecretEnv, not imported: it
// would link the Kubernetes API types into this lean binary): the S3
// storage's URL (credentials stay in the AWS SDK's own variables) and the
// HTTP secret every replica shares.
const (
	storageEnv = "FERRY_REGISTRY_STORAGE"
	secretEnv  = "FERRY_REGISTRY_HTTP_SECRET"
)

// storageFlags adds --root and --storage to fs; the function it returns
// gives the storage they chose: --storage (or $FERRY_REGISTRY_STORAGE), an
// s3:// URL, before --root.
func storageFlags(fs *flag.FlagSet) func() (registry.Config, error) {
	root := fs.String("root", "/var/lib/registry", "filesystem storage root")
	storage := fs.String("storage", os.Getenv(storageEnv), "S3 storage, s3://bucket[/prefix]?endpoint=URL&region=R&path-style=true (default $"+storageEnv+"); credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	return func() (registry.Config, error) {
		cfg := registry.Config{HTTPSecret: os.Getenv(secretEnv)}
		if *storage == "" {
			cfg.RootDir = *root
			return cfg, nil
		}
		s3, err := registry.ParseS3URL(*storage)
		if err != nil {
			return cfg, err
		}
		cfg.S3 = s3
		return cfg, nil
	}
}

func storageName(cfg registry.Config) string {
	if cfg.S3 != nil {
		return cfg.S3.String()
	}
	return cfg.RootDir
}

// gc is `ferry-registry gc [--dry-run] [--root DIR | --storage s3://…]`:
// a garbage collection of the storage in read-only maintenance mode (ferry
// remove runs it in a registry pod; every replica serves pulls meanwhile),
// or with --dry-run a measure of what it would free (the dashboard's). It
// prints the result as one JSON line.
func gc(args []string) error {
	fs := flag.NewFlagSet("ferry-registry gc", flag.ContinueOnError)
	storage := storageFlags(fs)
	settle := fs.Duration("settle", 0, "wait this long in read-only mode before marking (default: twice the registries' poll interval plus 1s)")
	dryRun := fs.Bool("dry-run", false, "measure what a collection would free, delete nothing (no read-only mode)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := storage()
	if err != nil {
		return err
	}
	res, err := registry.GarbageCollect(context.Background(), cfg, registry.GCOptions{Settle: *settle, DryRun: *dryRun})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// probe is `ferry-registry probe --addr HOST:PORT`, the readiness probe of
// a replica (its image has no shell and no HTTP client): it succeeds when
// GET /v2/ answers 200, or 401 with the registry's basic-auth challenge.
// With --wait D it tries again every 20 ms for up to D, and succeeds
// whatever the answer: the container's postStart hook, which holds the
// kubelet's "running" — and with it the readiness probe the kubelet sends at
// once then — until the registry listens, so that probe is not lost to a
// process still starting (a second, the probe's period). It never fails
// the container: the readiness probe judges.
func probe(args []string) error {
	fs := flag.NewFlagSet("ferry-registry probe", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:5000", "the registry's address")
	wait := fs.Duration("wait", 0, "try for up to this long, then succeed anyway (a postStart hook)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	check := func() error {
		resp, err := client.Get("http://" + *addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || (resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != "") {
			return nil
		}
		return fmt.Errorf("GET /v2/: %s", resp.Status)
	}
	if *wait <= 0 {
		return check()
	}
	for end := time.Now().Add(*wait); time.Now().Before(end) && check() != nil; {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// migrate is `ferry-registry migrate --from-root DIR` with the S3 storage of
// $FERRY_REGISTRY_STORAGE: ferry init --migrate runs it in a Job on the
// filesystem registry's node before it moves the registry onto the bucket.
// It prints registry.MigrateResult as one JSON line.
func migrate(args []string) error {
	fs := flag.NewFlagSet("ferry-registry migrate", flag.ContinueOnError)
	from := fs.String("from-root", "/var/lib/registry", "the filesystem storage to copy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := os.Getenv(storageEnv)
	if s == "" {
		return fmt.Errorf("migrate: $%s names no S3 storage to copy to", storageEnv)
	}
	s3, err := registry.ParseS3URL(s)
	if err != nil {
		return err
	}
	res, err := registry.Migrate(context.Background(), registry.Config{RootDir: *from}, registry.Config{S3: s3}, registry.GCOptions{})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// drained is a context done delay after ctx: the registry keeps serving
// that long once told to stop.
func drained(ctx context.Context, delay time.Duration) context.Context {
	if delay <= 0 {
		return ctx
	}
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		time.Sleep(delay)
		cancel()
	}()
	return out
}
