package registry_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/registry"
)

// within fails the test when f does not return within d: the bug it guards
// against is a Serve that nothing stops, so a hang must fail, not time out
// the whole test binary.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// TestServeStopsWhenShutdownComesFirst is run with -race (make test): a
// Shutdown or a cancelled context that comes before Serve has set up its
// HTTP server must still stop it, without a data race on that server.
func TestServeStopsWhenShutdownComesFirst(t *testing.T) {
	listen := func(t *testing.T) net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	newServer := func(t *testing.T) *registry.Server {
		srv, err := registry.New(context.Background(), registry.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) error
	}{
		{"ServeUntil with a cancelled context", func(t *testing.T) error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return newServer(t).ServeUntil(ctx, listen(t), time.Second)
		}},
		{"Shutdown then Serve", func(t *testing.T) error {
			srv := newServer(t)
			if err := srv.Shutdown(context.Background()); err != nil {
				return err
			}
			l := listen(t)
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
				return errors.New("Serve after Shutdown left the listener open")
			}
			return nil
		}},
		{"Shutdown racing Serve", func(t *testing.T) error {
			srv := newServer(t)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(listen(t)) }()
			if err := srv.Shutdown(context.Background()); err != nil {
				return err
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The race window is a few instructions wide: try it often.
			for range 50 {
				if err := within(t, 10*time.Second, tc.name, func() error { return tc.run(t) }); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
