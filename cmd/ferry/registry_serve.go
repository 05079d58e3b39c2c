package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/redact"
	"github.com/ferrypkg/ferry/registry"
)

type registryServeOptions struct {
	storageOptions
	addr            string
	htpasswd        string
	tlsCert         string
	tlsKey          string
	insecureNoAuth  bool
	output          string
	logLevel        string
	shutdownTimeout time.Duration
	load            []string
}

func newRegistryServeCmd() *cobra.Command {
	o := registryServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve an OCI registry (distribution v3 with the referrers API) from a local directory or an S3 bucket",
		Example: `  # A registry on 127.0.0.1:5000 (no password on loopback)
  ferry registry serve

  # An offline mirror for a network: TLS, a password file, a package loaded first
  ferry registry serve --addr 0.0.0.0:5000 --tls-cert tls.crt --tls-key tls.key --htpasswd htpasswd --load app.tar.zst`,
		Long: `Serve an OCI distribution-spec v1.1 registry: filesystem or S3 storage, deletes
enabled, the referrers API, optional htpasswd basic auth and TLS.

With --storage s3://…, several serve processes on one bucket (and prefix) are one
registry: run them behind any load balancer. They share the upload secret (kept
in the bucket), digest aliases, referrers and the read-only maintenance mode that
` + "`ferry registry gc`" + ` sets.

With --htpasswd, a client whose credentials were refused more than 5 times is
answered 429 (Retry-After) for a while, doubling with each further refusal up to
5 min, so passwords can not be guessed at full speed.

It listens on 127.0.0.1:5000 by default. Listening on a non-loopback address
requires --htpasswd, or --insecure-no-auth to serve anyone who can reach it.
SIGINT/SIGTERM stop it gracefully: in-flight requests (uploads included) get
--shutdown-timeout to finish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRegistryServe(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	o.storageOptions.register(f)
	f.StringVar(&o.addr, "addr", registry.DefaultAddr, "address to listen on")
	f.StringVar(&o.htpasswd, "htpasswd", "", "require basic auth checked against this htpasswd file (bcrypt)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (PEM); needs --tls-key")
	f.StringVar(&o.tlsKey, "tls-key", "", "TLS private key file (PEM); needs --tls-cert")
	f.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "allow a non-loopback address without --htpasswd")
	cli.AddOutputFlag(cmd, &o.output)
	f.StringVar(&o.logLevel, "log-level", "off", "registry log level on stderr: off, error, warn, info or debug")
	f.StringArrayVar(&o.load, "load", nil, "load this package into the storage first, as an offline mirror (repeatable)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for in-flight requests")
	return cmd
}

// defaultRegistryRoot is $XDG_DATA_HOME/ferry/registry, or
// ~/.local/share/ferry/registry.
func defaultRegistryRoot() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "ferry", "registry"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("registry root: %w (pass --root)", err)
	}
	return filepath.Join(home, ".local", "share", "ferry", "registry"), nil
}

// isLoopback reports whether a listen address only accepts local
// connections: a loopback IP or "localhost". An empty host (all interfaces)
// is not loopback.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

func slogLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	switch level {
	case "off", "":
		return slog.New(slog.DiscardHandler), nil
	case "error":
		l = slog.LevelError
	case "warn":
		l = slog.LevelWarn
	case "info":
		l = slog.LevelInfo
	case "debug":
		l = slog.LevelDebug
	default:
		return nil, fmt.Errorf("--log-level %q: want off, error, warn, info or debug", level)
	}
	return slog.New(redact.Handler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))), nil
}

func runRegistryServe(ctx context.Context, stdout, stderr io.Writer, o registryServeOptions) error {
	if err := cli.CheckOutput(o.output, false); err != nil {
		return err
	}
	loopback, err := isLoopback(o.addr)
	if err != nil {
		return err
	}
	if !loopback && o.htpasswd == "" && !o.insecureNoAuth {
		return fmt.Errorf("refusing to serve %s without authentication: pass --htpasswd FILE, or --insecure-no-auth to allow anyone who can reach it", o.addr)
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	logger, err := slogLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	if cfg.S3 != nil {
		// Before anything is served: a wrong bucket, endpoint or
		// credentials fail here, in one line.
		if err := registry.CheckStorage(ctx, cfg); err != nil {
			return err
		}
	}
	if len(o.load) > 0 {
		results, err := loadPackages(ctx, cfg, o.load)
		if err != nil {
			return err
		}
		if o.output == "text" {
			printLoaded(stdout, results, o.addr)
		}
	}
	// The registry outlives ctx: cancellation starts a graceful shutdown,
	// during which in-flight requests still need a live registry.
	cfg.Addr, cfg.HTPasswdFile, cfg.TLSCertFile, cfg.TLSKeyFile = o.addr, o.htpasswd, o.tlsCert, o.tlsKey
	srv, err := registry.New(context.WithoutCancel(ctx), cfg, registry.WithLogger(logger))
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("listen %s: %w", o.addr, err)
	}
	scheme := "http"
	if srv.TLS() {
		scheme = "https"
	}
	info := struct {
		Address string `json:"address"`
		URL     string `json:"url"`
		Root    string `json:"root,omitempty"`
		Storage string `json:"storage"`
		TLS     bool   `json:"tls"`
		Auth    bool   `json:"auth"`
	}{l.Addr().String(), scheme + "://" + l.Addr().String(), cfg.RootDir, storageName(cfg), srv.TLS(), o.htpasswd != ""}
	if o.output == "json" {
		if err := json.NewEncoder(stdout).Encode(info); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "ferry registry listening on %s (storage %s)\n", info.URL, info.Storage)
	}

	if err := srv.ServeUntil(ctx, l, o.shutdownTimeout); err != nil {
		return err
	}
	if o.output == "text" {
		fmt.Fprintln(stdout, "ferry registry stopped")
	}
	return nil
}
