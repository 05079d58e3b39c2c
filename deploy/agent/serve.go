package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/confine"
)

// What Serve listens on and answers.
const (
	// DefaultAddr is where Serve listens when ServeOptions.Addr is empty:
	// Port, on every address.
	DefaultAddr = ":8443"
	// DefaultDrainDelay is how long Serve keeps answering, unready, once
	// asked to stop, so that the Service stops sending requests first.
	DefaultDrainDelay = 2 * time.Second
	// DefaultShutdownTimeout bounds the wait for requests in flight.
	DefaultShutdownTimeout = 10 * time.Second
)

// ServeOptions configure Serve. CertFile and KeyFile are required.
type ServeOptions struct {
	// Addr is the TCP address to listen on; DefaultAddr if empty.
	Addr string
	// Listener, if set, is served instead of listening on Addr.
	Listener net.Listener
	// CertFile and KeyFile are the PEM serving certificate (with its
	// chain) and key, read once at the start.
	CertFile, KeyFile string
	// GetCertificate, if set, gives the certificate each handshake
	// presents instead (servingcert.Source: a rotated certificate served
	// without a restart); CertFile and KeyFile are then not read.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Ready, if set, says whether the agent can decide; cluster.AgentPathHealth answers
	// 503 with its error otherwise.
	Ready func(context.Context) error
	// DrainDelay: DefaultDrainDelay if 0, none if negative.
	DrainDelay time.Duration
	// ShutdownTimeout: DefaultShutdownTimeout if ≤ 0.
	ShutdownTimeout time.Duration
	// Logger receives the server's errors; nil discards them.
	Logger *slog.Logger
	// Handlers serve more paths (the upload endpoint); they set their own
	// deadlines past the server's short ones (http.ResponseController).
	Handlers map[string]http.Handler
}

// Serve answers AdmissionReviews with h at cluster.AgentPathMutate and readiness at
// cluster.AgentPathHealth, over HTTPS, until ctx is done; then it turns unready, waits
// DrainDelay, and shuts down, letting requests in flight finish. It
// returns nil after a clean shutdown.
func Serve(ctx context.Context, h http.Handler, opts ServeOptions) error {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.DrainDelay == 0 {
		opts.DrainDelay = DefaultDrainDelay
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tlsConfig := &tls.Config{GetCertificate: opts.GetCertificate, MinVersion: tls.VersionTLS12}
	if opts.GetCertificate == nil {
		cert, err := confine.LoadKeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.Handle(cluster.AgentPathMutate, h)
	for p, h := range opts.Handlers {
		mux.Handle(p, h)
	}
	mux.HandleFunc(cluster.AgentPathHealth, func(w http.ResponseWriter, r *http.Request) {
		if stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		if opts.Ready != nil {
			if err := opts.Ready(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	ln := opts.Listener
	var err error
	if ln == nil {
		if ln, err = net.Listen("tcp", opts.Addr); err != nil {
			return err
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stopping.Store(true)
	if opts.DrainDelay > 0 {
		time.Sleep(opts.DrainDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
