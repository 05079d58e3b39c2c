package reach

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRegistryClientRetriesRefused: a registry that refuses connections
// for a moment (restarting) is waited for, not failed on.
func TestRegistryClientRetriesRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close() // nothing listens: connections are refused
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	t.Cleanup(func() { srv.Close() })
	go func() {
		time.Sleep(700 * time.Millisecond)
		l, err := net.Listen("tcp", host)
		if err != nil {
			t.Error(err)
			return
		}
		srv.Serve(l)
	}()
	client := RegistryClient()
	resp, err := client.Get("http://" + host + "/v2/")
	if err != nil {
		t.Fatalf("a registry back after 0.7 s: %v", err)
	}
	resp.Body.Close()
}
