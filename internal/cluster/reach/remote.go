package reach

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"time"

	"github.com/ferrypkg/ferry/internal/cluster/kube"

	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// RegistryClient is the HTTP client ferry talks to the in-cluster
// registry with (plain HTTP: it is reached on loopback): retries with
// backoff — oras-go's, and also on a refused connection, for up to about
// 10 s (registryRetry): the registry restarts (after a garbage collection,
// on another node) and its Service has no ready endpoint for a moment,
// which is no reason for a deploy or a remove to fail.
func RegistryClient() *http.Client {
	return &http.Client{Transport: &retry.Transport{Base: registryTransport(), Policy: func() retry.Policy { return registryRetry }}}
}

// registryTransport is Go's default transport whose connections let a
// blob read from a package archive be sent from the file (zerocopy).
func registryTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = zerocopy.WrapDial(t.DialContext)
	return t
}

// registryRetry is RegistryClient's retry policy: oras-go's default
// (5xx, 429, 408, timeouts, resets; 200 ms to 3 s apart) with refused
// connections retried too, 6 times, and 507 not retried: a registry whose
// storage is full says so at once, and it stays full until a removal.
var registryRetry retry.Policy = &retry.GenericPolicy{
	Retryable: func(resp *http.Response, err error) (bool, error) {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true, nil
		}
		if err == nil && resp != nil && resp.StatusCode == http.StatusInsufficientStorage {
			return false, nil
		}
		return retry.DefaultPredicate(resp, err)
	},
	Backoff:  retry.DefaultBackoff,
	MinWait:  200 * time.Millisecond,
	MaxWait:  3 * time.Second,
	MaxRetry: 6,
}

// WaitRegistry waits until the registry itself answers at host: it asks
// for the account (401) where the read-only injector, which may keep the
// NodePort for a while after the hand-over, lets anyone read.
func WaitRegistry(ctx context.Context, host string, timeout time.Duration) error {
	return kube.WaitHTTP(ctx, host, http.StatusUnauthorized, "the registry", timeout)
}
