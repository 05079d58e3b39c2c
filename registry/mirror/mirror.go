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

	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
)

// Image is one image a mirror load made pullable.
type Image struct {
	// Ref is the original reference, e.g. docker.io/library/nginx:1.27.
	Ref string `json:"ref"`
	// Repository and Tag are where the mirror serves it: the original path
	// without its registry host (library/nginx, 1.27).
	Repository string `json:"repository"`
	Tag        string `json:"tag,omitempty"`
	Digest     string `json:"digest"`
}

// Result tells what Load put into a registry.
type Result struct {
	// Package is the repository:tag the whole package was pushed to.
	Package string  `json:"package"`
	Root    string  `json:"root"`
	Images  []Image `json:"images"`
	// BytesPushed counts the blob bytes uploaded (not those the registry
	// had, nor those mounted from the package's repository).
	BytesPushed int64 `json:"bytesPushed"`
}

// Path is the repository path an image is mirrored under: its
// original path without the registry host, so docker.io/library/nginx:1.27
// becomes library/nginx and ghcr.io/org/app:v1 becomes org/app. A
// containerd or docker mirror for the original registry then finds it.
func Path(ref string) (repo, tag string, err error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	if t, ok := named.(reference.Tagged); ok {
		tag = t.Tag()
	}
	return reference.Path(named), tag, nil
}

// Load copies a package into the registry at host (host[:port][/prefix],
// plain HTTP on loopback; a prefix goes before every repository): the whole package under its own name (<name>:<version>), then
// each image under its original repository path and tag, by the digest the
// package recorded, mounting blobs from the package repository.
func Load(ctx context.Context, host string, r *artifact.Reader, opts artifact.RemoteOptions) (*Result, error) {
	cfg := r.Config()
	pkgRepo := cfg.Name
	pkgRef := fmt.Sprintf("%s/%s:%s", host, pkgRepo, cfg.Version)
	pushed, err := artifact.Push(ctx, r, pkgRef, artifact.PushOptions{Remote: opts})
	if err != nil {
		return nil, err
	}
	src, err := opts.Repository(pkgRef)
	if err != nil {
		return nil, err
	}
	res := &Result{Package: pkgRepo + ":" + cfg.Version, Root: r.Root().Digest.String(), BytesPushed: pushed.BytesPushed}
	seen := map[string]string{} // repo:tag → digest
	for _, c := range r.Config().Components {
		for _, img := range c.Images {
			repoPath, tag, err := Path(img.Ref)
			if err != nil {
				return nil, err
			}
			key := repoPath + ":" + tag
			if prev, ok := seen[key]; ok {
				if prev != img.Digest.String() {
					return nil, fmt.Errorf("mirror %s: %s already holds %s from another image of the package", img.Ref, key, prev)
				}
				continue
			}
			seen[key] = img.Digest.String()
			dst, err := opts.Repository(host + "/" + repoPath)
			if err != nil {
				return nil, err
			}
			desc, err := src.Resolve(ctx, img.Digest.String())
			if err != nil {
				return nil, fmt.Errorf("mirror %s: %w", img.Ref, err)
			}
			copyOpts := oras.CopyGraphOptions{
				MountFrom: func(context.Context, ocispec.Descriptor) ([]string, error) {
					return []string{src.Reference.Repository}, nil
				},
			}
			if err := oras.CopyGraph(ctx, src, dst, desc, copyOpts); err != nil {
				return nil, fmt.Errorf("mirror %s: %w", img.Ref, err)
			}
			if tag != "" {
				if err := dst.Tag(ctx, desc, tag); err != nil {
					return nil, fmt.Errorf("mirror %s: tag: %w", img.Ref, err)
				}
			}
			res.Images = append(res.Images, Image{Ref: img.Ref, Repository: repoPath, Tag: tag, Digest: img.Digest.String()})
		}
	}
	sort.Slice(res.Images, func(i, j int) bool { return res.Images[i].Ref < res.Images[j].Ref })
	return res, nil
}

// Snippets renders the configuration that makes containerd and docker
// pull the mirrored images from the registry at host (plain HTTP).
func Snippets(host string, res []*Result) string {
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
func LoadInto(ctx context.Context, cfg registry.Config, pkgs []*artifact.Reader, opts ...registry.Option) ([]*Result, error) {
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
func loadAll(ctx context.Context, host string, pkgs []*artifact.Reader) ([]*Result, error) {
	var out []*Result
	for _, r := range pkgs {
		res, err := Load(ctx, host, r, artifact.RemoteOptions{PlainHTTP: true})
		if err != nil {
			return out, fmt.Errorf("load %s: %w", r.Path(), err)
		}
		out = append(out, res)
	}
	return out, nil
}
