package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/dashboard"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/confine"
)

func newDashboardCmd() *cobra.Command {
	var (
		kube              kubeFlags
		contexts, names   []string
		allContexts       bool
		namespace, addr   string
		certFile, keyFile string
		verbose           bool
		advisoryMaxAge    time.Duration
		fleet             dashboardFleetFlags
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a web UI of the clusters' packages, registry and uploads",
		Long: `Serve ferry's dashboard: every cluster's Packages (version, digest, signer, charts,
images, readiness, history), each package's graph and what it installed, the
in-cluster registry (repositories, storage, what garbage collection would free),
and the upload of a signed archive, inspected and verified first.

On 127.0.0.1 (the default) it acts with your kubeconfig's credentials, so the
cluster's RBAC applies to you as it does to kubectl. On any other address it
needs --tls-cert and --tls-key, and every browser logs in with a Kubernetes
bearer token (checked with a TokenReview) that it then acts with; --host names
the names it is reached by.

With --fleet the context (the first of --contexts) names the fleet's
management cluster, and the dashboard adds the fleet's pages: its members,
a packages x members matrix, placements and their rollouts (with a
rollback), tracks (with a promote form), and each carried member's bundle
and report. --fleet-registry names the centre's registry, which promoting
a tag, importing a report and making a bundle read; the registry flags say
how to reach it.`,
		Example: `  ferry dashboard                        # http://127.0.0.1:8480, the current context
  ferry dashboard --all-contexts
  ferry dashboard --addr 0.0.0.0:8443 --tls-cert tls.crt --tls-key tls.key --host ferry.example.internal
  ferry dashboard --context centre --fleet --fleet-registry registry.example:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fleetOpts, err := fleet.options(cmd)
			if err != nil {
				return err
			}
			loopback := dashboard.Loopback(addr)
			if !loopback && (certFile == "" || keyFile == "") {
				return errors.New("--addr is not on loopback: pass --tls-cert and --tls-key (off loopback the dashboard needs TLS and a login)")
			}
			clusters, err := dashboardClusters(&kube, contexts, allContexts)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen %s: %w", addr, err)
			}
			defer l.Close()
			log := jsonLogger(cmd, verbose)
			srv, err := dashboard.New(dashboard.Options{
				Clusters: clusters, Namespace: namespace, Hosts: dashboard.HostsFor(l.Addr().String(), names...),
				Login: !loopback, TLS: certFile != "", AllowPaths: loopback, Logger: log, Fleet: fleetOpts,
				AdvisoryMaxAge: advisoryMaxAge,
			})
			if err != nil {
				return err
			}
			defer srv.Close()
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: nil}
			scheme := "http"
			if certFile != "" {
				cert, err := confine.LoadKeyPair(certFile, keyFile)
				if err != nil {
					return fmt.Errorf("--tls-cert/--tls-key: %w", err)
				}
				hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
				scheme = "https"
			}
			host := l.Addr().String()
			if len(names) > 0 {
				host = dashboard.HostsFor(host, names[0])[0]
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ferry dashboard on %s://%s/ (%d cluster(s)); Ctrl-C stops it\n", scheme, host, len(clusters))
			ctx := cmd.Context()
			errc := make(chan error, 1)
			go func() {
				if hs.TLSConfig != nil {
					errc <- hs.ServeTLS(l, "", "")
				} else {
					errc <- hs.Serve(l)
				}
			}()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
			return nil
		},
	}
	kube.register(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&contexts, "contexts", nil, "kubeconfig contexts to show, comma-separated (default: --context, or the current one)")
	f.BoolVar(&allContexts, "all-contexts", false, "show every context of the kubeconfig")
	f.StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace in each cluster")
	f.StringVar(&addr, "addr", "127.0.0.1:8480", "address to serve on; off loopback it needs TLS and a login")
	f.StringSliceVar(&names, "host", nil, "names the dashboard is reached by (host or host:port), besides its address: other Host headers are refused")
	f.StringVar(&certFile, "tls-cert", "", "serving certificate (PEM)")
	f.StringVar(&keyFile, "tls-key", "", "serving key (PEM)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every request refused, every upload and every fleet action")
	f.DurationVar(&advisoryMaxAge, "advisory-max-age", dashboard.DefaultAdvisoryMaxAge, "the findings pages show a cluster's or the fleet's advisory database as old past this age")
	fleet.register(cmd)
	return cmd
}

// dashboardFleetFlags turn on the fleet's pages.
type dashboardFleetFlags struct {
	on                  bool
	namespace, registry string
	remote              cli.RemoteFlags
}

func (f *dashboardFleetFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.on, "fleet", false, "show the fleet's pages: the context is the fleet's management cluster")
	fl.StringVar(&f.namespace, "fleet-namespace", centre.DefaultNamespace, "the fleet's namespace in the management cluster")
	fl.StringVar(&f.registry, "fleet-registry", "", "the centre's registry (host[:port]): promoting a tag, importing a report, making a bundle and the fleet's SBOM pages read it")
	f.remote.Register(cmd)
}

// options are the fleet's dashboard options, or nil without --fleet.
func (f *dashboardFleetFlags) options(cmd *cobra.Command) (*dashboard.FleetOptions, error) {
	if !f.on {
		for _, name := range []string{"fleet-namespace", "fleet-registry", "plain-http", "ca-file", "insecure", "username", "password-stdin"} {
			if cmd.Flags().Changed(name) {
				return nil, fmt.Errorf("--%s needs --fleet", name)
			}
		}
		return nil, nil
	}
	ro, err := f.remote.Options(cmd, f.registry)
	if err != nil {
		return nil, err
	}
	return &dashboard.FleetOptions{Namespace: f.namespace, Registry: f.registry, Remote: ro}, nil
}

// dashboardClusters are the kubeconfig's contexts to show, each with its
// own REST configuration.
func dashboardClusters(kube *kubeFlags, contexts []string, all bool) ([]dashboard.Cluster, error) {
	rules, err := kube.rules()
	if err != nil {
		return nil, err
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	switch {
	case all:
		contexts = contexts[:0]
		for name := range raw.Contexts {
			contexts = append(contexts, name)
		}
		slices.Sort(contexts)
		if i := slices.Index(contexts, raw.CurrentContext); i > 0 {
			contexts = append([]string{raw.CurrentContext}, slices.Delete(contexts, i, i+1)...)
		}
	case len(contexts) == 0 && kube.context != "":
		contexts = []string{kube.context}
	case len(contexts) == 0:
		contexts = []string{raw.CurrentContext}
	}
	var out []dashboard.Cluster
	for _, name := range contexts {
		if _, ok := raw.Contexts[name]; !ok {
			return nil, fmt.Errorf("kubeconfig: no context %q", name)
		}
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig context %s: %w", name, err)
		}
		out = append(out, dashboard.Cluster{Name: name, Config: cfg})
	}
	if len(out) == 0 {
		return nil, errors.New("kubeconfig: no context to show (name one with --context)")
	}
	return out, nil
}
