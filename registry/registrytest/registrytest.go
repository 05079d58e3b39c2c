// Package registrytest starts ferry's embedded registry for tests of other
// packages: in memory, behind httptest on 127.0.0.1, plain HTTP, stopped when
// the test ends.
package registrytest

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/ferrypkg/ferry/registry"
)

// New starts an in-memory registry and returns its host, e.g.
// "127.0.0.1:34567", for references such as host+"/repo:tag". Clients must
// use plain HTTP (oras-go: remote.Repository.PlainHTTP = true).
func New(t testing.TB, opts ...registry.Option) string {
	t.Helper()
	return NewServer(t, registry.Config{}, opts...).Listener.Addr().String()
}

// NewServer starts a registry built from cfg behind httptest and returns the
// test server (URL, Client, Listener); both are closed when the test ends.
func NewServer(t testing.TB, cfg registry.Config, opts ...registry.Option) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := registry.New(ctx, cfg, opts...)
	if err != nil {
		cancel()
		t.Fatalf("registrytest: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		_ = srv.Shutdown(context.Background())
		cancel()
	})
	return ts
}

// Htpasswd writes an htpasswd file giving user password (bcrypt at its
// lowest cost) into a temporary folder and returns its path, for
// registry.Config.HTPasswdFile.
func Htpasswd(t testing.TB, user, password string) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(path, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Host returns the host:port of a test server's URL.
func Host(ts *httptest.Server) string {
	return strings.TrimPrefix(ts.URL, "http://")
}
