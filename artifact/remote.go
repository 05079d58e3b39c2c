package artifact

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/ferrypkg/ferry/artifact/internal/transport"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/unreachable"
	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// RemoteOptions says how to reach registries. The zero value uses HTTPS and
// the docker config file's credentials.
type RemoteOptions struct {
	// PlainHTTP talks HTTP instead of HTTPS to every registry. Loopback
	// registries (127.0.0.0/8, localhost, ::1) are spoken to over plain
	// HTTP anyway, unless TLS is set.
	PlainHTTP bool
	// TLS configures HTTPS (extra root CAs, or InsecureSkipVerify) when
	// Client is nil; if nil, the system roots are used. Setting it also
	// makes loopback registries speak HTTPS (unless PlainHTTP).
	TLS *tls.Config
	// Credential resolves credentials per registry host; if nil, the docker
	// config file ($DOCKER_CONFIG/config.json or ~/.docker/config.json) is used.
	Credential auth.CredentialFunc
	// Client is the HTTP client; if nil, a retrying default client is used.
	// Its transport is wrapped to give up stalled transfers either way.
	Client *http.Client
	// StallWindow and MinRate give up a transfer whose registry sends
	// slower than MinRate bytes a second over StallWindow of waiting on it,
	// or answers nothing within StallWindow, with an error wrapping
	// ErrStalled; if 0, DefaultStallWindow and DefaultMinRate. A negative
	// StallWindow turns this off.
	StallWindow time.Duration
	MinRate     int64
}

// dockerHub is where docker.io references are served from.
const dockerHub = "registry-1.docker.io"

// Repository returns an oras-go repository for ref (host/path[:tag|@digest]).
func (o RemoteOptions) Repository(ref string) (*remote.Repository, error) {
	parsed, err := registry.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("invalid registry reference %q: %w", ref, err)
	}
	if parsed.Registry == "docker.io" {
		parsed.Registry = dockerHub
	}
	client, err := o.client()
	if err != nil {
		return nil, err
	}
	return &remote.Repository{Reference: parsed, PlainHTTP: o.plainHTTP(parsed.Registry), Client: client}, nil
}

// Registry returns an oras-go registry client for host (host[:port];
// docker.io is Docker Hub), e.g. to log in to it.
func (o RemoteOptions) Registry(host string) (*remote.Registry, error) {
	if host == "docker.io" {
		host = dockerHub
	}
	reg, err := remote.NewRegistry(host)
	if err != nil {
		return nil, fmt.Errorf("invalid registry host %q: %w", host, err)
	}
	if reg.Client, err = o.client(); err != nil {
		return nil, err
	}
	reg.PlainHTTP = o.plainHTTP(host)
	return reg, nil
}

// plainHTTP says whether host is spoken to over plain HTTP.
func (o RemoteOptions) plainHTTP(host string) bool {
	return o.PlainHTTP || (o.TLS == nil && isLoopback(host))
}

// MaxDockerConfigSize bounds the docker config file (4 MiB; one with a
// hundred registries' credentials is a few KiB).
const MaxDockerConfigSize = 4 << 20

// DockerCredentials is the docker config file's credential store
// ($DOCKER_CONFIG/config.json, else ~/.docker/config.json), as docker,
// oras and helm read it, once the file is checked: a regular file of at
// most MaxDockerConfigSize, for the store reads it whole.
func DockerCredentials(opt credentials.StoreOptions) (*credentials.DynamicStore, error) {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("docker config: %w", err)
		}
		dir = filepath.Join(home, ".docker")
	}
	file := filepath.Join(dir, "config.json")
	if err := confine.CheckPath(file, MaxDockerConfigSize); err != nil {
		return nil, fmt.Errorf("docker config: %w", err)
	}
	store, err := credentials.NewStore(file, opt)
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", file, err)
	}
	return store, nil
}

// client is the authenticating HTTP client o describes.
func (o RemoteOptions) client() (*auth.Client, error) {
	cred := o.Credential
	if cred == nil {
		store, err := DockerCredentials(credentials.StoreOptions{})
		if err != nil {
			return nil, err
		}
		cred = credentials.Credential(store)
	}
	base := o.Client
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = zerocopy.WrapDial(t.DialContext) // blobs sent from the archive file
		if o.TLS != nil {
			t.TLSClientConfig = o.TLS.Clone()
		}
		base = &http.Client{Transport: retry.NewTransport(t)}
	}
	{
		c := *base
		next := c.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		c.Transport = unreachable.Transport{Next: next}
		base = &c
	}
	if o.StallWindow >= 0 {
		c := *base
		next := c.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		window, rate := o.StallWindow, o.MinRate
		if window == 0 {
			window = transport.DefaultStallWindow
		}
		if rate <= 0 {
			rate = transport.DefaultMinRate
		}
		c.Transport = &transport.StallTransport{Next: next, Window: window, MinRate: rate}
		base = &c
	}
	return &auth.Client{Client: base, Credential: cred, Cache: auth.NewCache(), Header: http.Header{"User-Agent": {"ferry"}}}, nil
}

func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Stall detection on a registry's answers (RemoteOptions.StallWindow,
// MinRate), as the git fetcher uses it too.
const (
	// DefaultStallWindow is how long a reader may wait on a registry's
	// response (its headers, or the next bytes of its body) before the
	// rate it got is judged (1 min).
	DefaultStallWindow = transport.DefaultStallWindow
	// DefaultMinRate is the slowest a registry may send while ferry waits
	// on it (16 KiB/s). Slower, and the transfer is given up as stalled.
	DefaultMinRate = transport.DefaultMinRate
)

// ErrStalled is wrapped by the error of a transfer given up because the
// registry sent too little for too long.
var ErrStalled = transport.ErrStalled

// NewStallTransport is next, giving up a request whose answer does not
// start within window, or whose body comes slower than minRate bytes a
// second while it is waited on, with an error wrapping ErrStalled — as
// RemoteOptions does for a registry, but for a POST's answer too (a git
// server answers a POST with the pack). A window or minRate ≤ 0 is
// DefaultStallWindow or DefaultMinRate.
func NewStallTransport(next http.RoundTripper, window time.Duration, minRate int64) http.RoundTripper {
	return transport.NewStallTransport(next, window, minRate)
}
