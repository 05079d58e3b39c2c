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
	"os"
	"os/signal"
	"syscall"
	"time"

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
	fs := flag.NewFlagSet("ferry-registry", flag.ContinueOnError)
	addr := fs.String("addr", ":5000", "address to listen on")
	root := fs.String("root", "/var/lib/registry", "filesystem storage root")
	htpasswd := fs.String("htpasswd", "", "htpasswd file (bcrypt) requiring basic auth; empty: no auth")
	grace := fs.Duration("shutdown-timeout", 25*time.Second, "how long in-flight requests may finish after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := registry.New(context.WithoutCancel(ctx), registry.Config{RootDir: *root, Addr: *addr, HTPasswdFile: *htpasswd}, registry.WithLogger(logger))
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	logger.Info("ferry-registry listening", "addr", l.Addr().String(), "root", *root, "auth", *htpasswd != "")
	return srv.ServeUntil(ctx, l, *grace)
}

// gc is `ferry-registry gc --root DIR`: a garbage collection of the storage
// (ferry remove runs it in the registry's pod, then restarts the pod). It
// prints the bytes before and after as one JSON line.
func gc(args []string) error {
	fs := flag.NewFlagSet("ferry-registry gc", flag.ContinueOnError)
	root := fs.String("root", "/var/lib/registry", "filesystem storage root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	res, err := registry.GarbageCollect(context.Background(), *root)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
