// Package mirror loads ferry packages into a registry as an offline mirror:
// each image under its original repository path and tag, the package under
// its own name. It is apart from package registry so that the lean
// in-cluster registry binary does not link the package model.
package mirror

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
)

// Snippets renders the configuration that makes containerd and docker
// pull the mirrored images from the registry at host (plain HTTP).
func Snippets(host string, res []*artifact.MirrorResult) string {
	registries := map[string]bool{}
	for _, r := range res {
		for _, img := range r.Images {
			named, err := reference.ParseNormalizedNamed(img.Ref)
			if err == nil {
				registries[reference.Domain(named)] = true
			}
		}
	}
	var names []string
	for n := range registries {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# containerd (config_path = \"/etc/containerd/certs.d\"): one file per source registry\n")
	for _, n := range names {
		server := "https://" + n
		if n == "docker.io" {
			server = "https://registry-1.docker.io"
		}
		fmt.Fprintf(&b, "# /etc/containerd/certs.d/%s/hosts.toml\nserver = %q\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n\n", n, server, host)
	}
	fmt.Fprintf(&b, "# docker (/etc/docker/daemon.json): docker mirrors docker.io only\n{\n  \"registry-mirrors\": [\"http://%s\"],\n  \"insecure-registries\": [%q]\n}\n", host, host)
	return b.String()
}

// LoadInto starts a registry on cfg's storage on a loopback port, without
// auth or TLS, just long enough to load the packages, then stops it: a
// mirror prepared without serving (`ferry registry load`), or before serving
// (`ferry registry serve --load`). cfg.RootDir should be set: in-memory
// storage would be lost.
//
// When the load ends (also when it failed, unless ctx ended), it removes the
// upload sessions in the storage that nothing wrote to since it started
// (registry.PurgeUploads): those of an earlier load that was killed, its
// own that failed, and any other writer's idle as long.
func LoadInto(ctx context.Context, cfg registry.Config, pkgs []*artifact.Reader, opts ...registry.Option) (results []*artifact.MirrorResult, err error) {
	start := time.Now()
	if cfg.RootDir != "" || cfg.S3 != nil {
		defer func() {
			if ctx.Err() != nil {
				return
			}
			if _, perr := registry.PurgeUploads(ctx, cfg, start); perr != nil && err == nil {
				err = perr
			}
		}()
	}
	cfg.HTPasswdFile, cfg.TLSCertFile, cfg.TLSKeyFile, cfg.Addr = "", "", "", ""
	srv, err := registry.New(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	results, lerr := loadAll(ctx, l.Addr().String(), pkgs)
	if err := srv.Shutdown(context.Background()); err != nil && lerr == nil {
		lerr = err
	}
	<-done
	return results, lerr
}

// loadAll loads each package into the registry at host.
func loadAll(ctx context.Context, host string, pkgs []*artifact.Reader) ([]*artifact.MirrorResult, error) {
	var out []*artifact.MirrorResult
	for _, r := range pkgs {
		res, err := artifact.Mirror(ctx, r, host, artifact.MirrorOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}})
		if err != nil {
			return out, fmt.Errorf("load %s: %w", r.Path(), err)
		}
		out = append(out, res)
	}
	return out, nil
}
