package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"oras.land/oras-go/v2"

	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/gitserver"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/confine"
)

type gitServerOptions struct {
	addr, htpasswd, repos, registry, cacheDir string
	namespace                                 string
	kube                                      kubeFlags
	insecureNoAuth, verbose                   bool
	timeout, shutdownTimeout                  time.Duration
	remote                                    cli.RemoteFlags
}

func newGitServerCmd() *cobra.Command {
	var o gitServerOptions
	cmd := &cobra.Command{
		Use:   "git-server",
		Short: "Serve the carried git repositories read-only over git's smart HTTP (in the cluster)",
		Example: `  # As ferry init runs it in the cluster: the repositories of the packages deployed in ferry
  ferry git-server -n ferry

  # Outside: the repositories listed in repos.json, from a local registry
  ferry git-server --repos repos.json --registry 127.0.0.1:5000 --addr 127.0.0.1:8080`,
		Long: `Serve the git repositories packages carry, read-only, over git's smart HTTP
protocol (v0, v1, v2; shallow clones too), for tools that speak only git
(Flux GitRepository, Argo CD). A repository is served at
http://<addr>/<host>/<path>.git, its original URL's host and path: clone
https://github.com/org/fleet.git as http://<addr>/github.com/org/fleet.git.
Only the carried ref and HEAD are advertised; pushes get 403.

In the cluster (` + "`ferry init`" + ` runs it so), --namespace names ferry's
namespace: the repositories are those the deployed packages carry (read at
each request), in the in-cluster registry, read with its account.

Outside, --repos names a JSON file listing the repositories and where their
git artifacts are in --registry:
  [{"url": "https://github.com/org/fleet.git", "ref": "refs/heads/main",
    "commit": "<40 hex>", "repository": "org/fleet", "digest": "sha256:…"}]
Each history (the artifact's git bundle) is fetched by digest, checked, and
indexed once, on disk: into --cache-dir, where a restarted server finds it
again, or without it into a temporary directory removed when the server
stops (and by the next ferry command if it was killed). Memory stays
bounded whatever the repositories hold: a file of gigabytes is streamed.

Clients authenticate with HTTP Basic against --htpasswd (bcrypt entries, as
the registry account's Secret holds). The registry password comes from
$` + cli.PasswordEnvRegistry + ` or --password-stdin, never from an argument.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGitServer(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ":8080", "address to serve HTTP on (/healthz for probes)")
	f.StringVar(&o.htpasswd, "htpasswd", "", "require HTTP Basic auth checked against this htpasswd file (bcrypt)")
	f.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "allow a non-loopback address without --htpasswd")
	f.StringVar(&o.repos, "repos", "", "JSON file listing the served repositories (see above)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "serve what the packages deployed in this ferry namespace carry (in the cluster)")
	f.StringVar(&o.registry, "registry", "", "the registry holding the repositories' artifacts (host:port)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "keep indexed repositories here (default: a temporary directory, removed on exit)")
	f.DurationVar(&o.timeout, "timeout", gitserver.DefaultTimeout, "bound on one request, the pack sent included")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for clones in flight")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log at debug level")
	o.remote.Register(cmd)
	o.kube.register(cmd)
	cmd.MarkFlagsMutuallyExclusive("repos", "namespace")
	cmd.MarkFlagsOneRequired("repos", "namespace")
	return cmd
}

func runGitServer(cmd *cobra.Command, o gitServerOptions) error {
	ctx := cmd.Context()
	loopback, err := isLoopback(o.addr)
	if err != nil {
		return err
	}
	if !loopback && o.htpasswd == "" && !o.insecureNoAuth {
		return fmt.Errorf("refusing to serve %s without authentication: pass --htpasswd FILE, or --insecure-no-auth to allow anyone who can reach it", o.addr)
	}
	var (
		entries gitserver.Entries
		count   int
		ro      artifact.RemoteOptions
	)
	if o.namespace != "" {
		if entries, ro, err = clusterGitEntries(ctx, &o); err != nil {
			return err
		}
		count = -1
	} else {
		list, err := readGitEntries(o.repos)
		if err != nil {
			return err
		}
		if len(list) > 0 && o.registry == "" {
			return errors.New("--registry: needed to read the repositories --repos lists")
		}
		if ro, err = o.remote.Options(cmd, o.registry); err != nil {
			return err
		}
		entries, count = staticEntries(list), len(list)
	}
	log := jsonLogger(cmd, o.verbose)
	open := func(_ context.Context, repository string) (oras.ReadOnlyTarget, error) {
		return ro.Repository(o.registry + "/" + repository)
	}
	opts := []gitserver.Option{gitserver.WithLogger(log), gitserver.WithTimeout(o.timeout)}
	if o.htpasswd != "" {
		// Read when the first request comes; checked now, so that a file
		// that cannot serve is refused at start.
		if err := gitserver.CheckHtpasswd(o.htpasswd); err != nil {
			return fmt.Errorf("--htpasswd: %w", err)
		}
		opts = append(opts, gitserver.WithAuth(gitserver.HtpasswdFile(o.htpasswd, 0)))
	}
	if o.cacheDir != "" {
		opts = append(opts, gitserver.WithCacheDir(o.cacheDir))
	}
	srv, err := gitserver.New(gitserver.FromRegistry(entries, open), opts...)
	if err != nil {
		return err
	}
	defer srv.Close()
	l, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.addr, err)
	}
	hs := &http.Server{
		Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	info := struct {
		Address      string `json:"address"`
		URL          string `json:"url"`
		Repositories int    `json:"repositories"`
		Auth         bool   `json:"auth"`
	}{l.Addr().String(), "http://" + l.Addr().String(), count, o.htpasswd != ""}
	if err := json.NewEncoder(cmd.OutOrStdout()).Encode(info); err != nil {
		l.Close()
		return err
	}
	log.Info("serving", "addr", info.Address, "repositories", count, "registry", o.registry, "namespace", o.namespace, "auth", info.Auth, "cacheDir", o.cacheDir)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(l) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", o.addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := srv.Close(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// readGitEntries reads --repos: a JSON list of gitserver.Entry, each with
// a URL, a commit, a registry repository and a manifest digest.
func readGitEntries(path string) ([]gitserver.Entry, error) {
	b, err := confine.ReadPath(path, artifact.MaxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("--repos: %w", err)
	}
	var entries []gitserver.Entry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("--repos %s: %w", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("--repos %s: more than one JSON value", path)
	}
	for i, e := range entries {
		switch {
		case e.URL == "":
			return nil, fmt.Errorf("--repos %s: entry %d: no url", path, i)
		case len(e.Commit) != 40:
			return nil, fmt.Errorf("--repos %s: entry %d (%s): commit %q: want 40 hex digits", path, i, e.URL, e.Commit)
		case e.Repository == "":
			return nil, fmt.Errorf("--repos %s: entry %d (%s): no registry repository", path, i, e.URL)
		}
		if err := e.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("--repos %s: entry %d (%s): digest %q: %w", path, i, e.URL, e.Digest, err)
		}
	}
	return entries, nil
}

// staticEntries is the seam's simplest form: a list read once.
func staticEntries(entries []gitserver.Entry) gitserver.Entries {
	return func(context.Context) ([]gitserver.Entry, error) { return entries, nil }
}

// clusterGitEntries is the in-cluster seam: the repositories with history
// that the packages deployed in o.namespace carry, read at each call, and
// the in-cluster registry (its Service, unless --registry) with its account.
func clusterGitEntries(ctx context.Context, o *gitServerOptions) (gitserver.Entries, artifact.RemoteOptions, error) {
	cs, _, err := agentClient(&o.kube)
	if err != nil {
		return nil, artifact.RemoteOptions{}, err
	}
	_, account, err := cluster.ReadRegistry(ctx, cs.CoreV1().Secrets(o.namespace))
	if err != nil {
		return nil, artifact.RemoteOptions{}, err
	}
	if o.registry == "" {
		if o.registry, err = kube.ServiceHost(ctx, cs, o.namespace, cluster.RegistryName); err != nil {
			return nil, artifact.RemoteOptions{}, err
		}
	}
	state := &rollout.State{Client: cs, Namespace: o.namespace}
	entries := func(ctx context.Context) ([]gitserver.Entry, error) {
		repos, err := state.Repositories(ctx)
		if err != nil {
			return nil, err
		}
		var out []gitserver.Entry
		for _, g := range repos {
			if g.History {
				out = append(out, gitserver.Entry{URL: g.URL, Ref: g.Ref, Commit: g.Commit, Repository: g.Path, Digest: g.Digest})
			}
		}
		return out, nil
	}
	return entries, artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(o.registry, auth.Credential{Username: account.Username, Password: account.Password}), Client: reach.RegistryClient()}, nil
}
