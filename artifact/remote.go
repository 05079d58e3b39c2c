package artifact

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// RemoteOptions says how to reach registries. The zero value uses HTTPS and
// the docker config file's credentials.
type RemoteOptions struct {
	// PlainHTTP talks HTTP instead of HTTPS to every registry. Loopback
	// registries (127.0.0.0/8, localhost, ::1) use plain HTTP when
	// PlainHTTP is false and they do not answer TLS either way, as crane does.
	PlainHTTP bool
	// Credential resolves credentials per registry host; if nil, the docker
	// config file ($DOCKER_CONFIG/config.json or ~/.docker/config.json) is used.
	Credential auth.CredentialFunc
	// Client is the HTTP client; if nil, a retrying default client is used.
	Client *http.Client
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
	repo := &remote.Repository{Reference: parsed, PlainHTTP: o.PlainHTTP || isLoopback(parsed.Registry)}
	cred := o.Credential
	if cred == nil {
		store, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
		if err != nil {
			return nil, fmt.Errorf("docker config: %w", err)
		}
		cred = credentials.Credential(store)
	}
	base := o.Client
	if base == nil {
		base = retry.DefaultClient
	}
	repo.Client = &auth.Client{Client: base, Credential: cred, Cache: auth.NewCache(), Header: http.Header{"User-Agent": {"ferry"}}}
	return repo, nil
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
