package main

import (
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/controller"
	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/redact"
)

// quietClients silences controller-runtime's logger, which the Package
// client of deploy, list, remove and init would otherwise report unset
// (with a stack trace, after 30 s); the controller sets its own.
func quietClients() { ctrllog.SetLogger(logr.Discard()) }

// packageClient is a quiet client for Packages.
func packageClient(cfg *rest.Config) (client.WithWatch, error) {
	quietClients()
	return deploy.PackageClient(cfg)
}

// jsonLogger logs JSON lines to the command's stderr, debug ones too when
// verbose: the agent's and the controller's logs.
func jsonLogger(cmd *cobra.Command, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(redact.Handler(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
}

func newControllerCmd() *cobra.Command {
	var (
		kube                        kubeFlags
		namespace, health           string
		registry                    string
		resync, driftCheck, gcQuiet time.Duration
		leaderElect, verbose        bool
		render                      renderFlags
		certs                       servingcert.Options
		rotate                      bool
	)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller that keeps Package objects installed (in the cluster; init deploys it)",
		Example: `  # As ferry init runs it in the cluster
  ferry controller -n ferry

  # Outside the cluster, against a kubeconfig context, checking for drift every minute
  ferry controller --context kind-air --leader-elect=false --resync 1m -v`,
		Long: `Run ferry's Package controller. ` + "`ferry init`" + ` deploys it in the ferry
namespace (Deployment ` + cluster.ControllerName + `) from ferry's own image.

Each Package (ferry.dev/v1alpha1) of ferry's namespace names a package in the
in-cluster registry by digest. The controller verifies its signature with
the public keys the Package names (fail closed: an unverifiable package is
never installed, and the Verified condition says why), installs or upgrades
its charts and manifests as ` + "`ferry deploy`" + ` does, rolls back on failure, prunes
what a new version no longer has, and reports conditions (Verified,
Installed, Ready), events, releases, objects and images in the status.

Every --resync, an unchanged Package (same root, keys, components and
values) is looked at without reading the registry or touching Helm; every
--drift-check it is installed again, which changes nothing that matches and
puts back what was changed or deleted by hand. Deleting a Package
removes what it installed, then garbage-collects the registry: once for a
batch of removals, when none has run for --gc-quiet.

Before Helm installs or upgrades a chart in the controller, the chart is
rendered as that install will render it (against the cluster, nothing
written) in a child process within --render-memory and --render-timeout: a
chart past a limit fails its Package's install, the reason on its status.

The leader rotates the agent's certificate --cert-renew-before its end (new CA
trusted first, old one dropped once no agent presents it).
Outside a Pod, --kubeconfig (or $KUBECONFIG) names the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, cfg, err := kube.clientConfig()
			if err != nil {
				return err
			}
			lim, err := render.limits()
			if err != nil {
				return err
			}
			if err := certs.Validate(); err != nil {
				return err
			}
			log := jsonLogger(cmd, verbose)
			ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				return err
			}
			if err := v1alpha1.AddToScheme(scheme); err != nil {
				return err
			}
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{
				Scheme:                        scheme,
				Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
				Metrics:                       metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress:        health,
				LeaderElection:                leaderElect,
				LeaderElectionID:              cluster.ControllerName,
				LeaderElectionNamespace:       namespace,
				LeaderElectionReleaseOnCancel: true,
			})
			if err != nil {
				return err
			}
			if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
				return err
			}
			if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
				return err
			}
			r := &controller.Reconciler{
				Client: mgr.GetClient(), Clientset: cs, Kube: kube.getter(),
				Namespace: namespace, Registry: registry, Resync: resync, DriftCheck: driftCheck,
				GCQuiet:  gcQuiet,
				Recorder: mgr.GetEventRecorder(controller.Name),
				// The child reaches the cluster as this process does.
				Render: &chartrender.Limited{Limits: lim, Cluster: chartrender.Cluster{Kubeconfig: kube.kubeconfig, Context: kube.context}},
			}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
			if rotate { // a runnable of the manager: only the leader rotates
				if err := mgr.Add(manager.RunnableFunc(servingcert.AgentRotator(cs, namespace, certs, log).Run)); err != nil {
					return err
				}
			}
			log.Info("starting", "namespace", namespace, "resync", resync.String(), "driftCheck", driftCheck.String(), "leaderElection", leaderElect)
			return mgr.Start(cmd.Context())
		},
	}
	kube.register(cmd)
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace: its Packages are reconciled")
	f.StringVar(&health, "health-addr", ":8081", "address of /healthz and /readyz (0 for none)")
	f.StringVar(&registry, "registry", "", "where the controller reaches the in-cluster registry, host:port (default: the registry Service's cluster IP)")
	f.DurationVar(&resync, "resync", controller.DefaultResync, "how often an unchanged Package is checked again (drift)")
	f.DurationVar(&driftCheck, "drift-check", controller.DefaultDriftCheck, "how often an unchanged Package is installed again, what was changed by hand put back")
	f.DurationVar(&gcQuiet, "gc-quiet", controller.DefaultGCQuiet, "how long the registry's garbage collection waits after the last removal (one collection for a batch)")
	f.BoolVar(&leaderElect, "leader-elect", true, "run only while holding the Lease "+cluster.ControllerName+" (one controller at a time)")
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logs")
	f.BoolVar(&rotate, "rotate-certificates", true, "keep the agent's serving certificate valid (rotated before its end, repaired when it cannot serve)")
	f.DurationVar(&certs.Validity, "cert-validity", servingcert.DefaultValidity, "how long a new certificate of the agent is valid")
	f.DurationVar(&certs.RenewBefore, "cert-renew-before", 0, "how long before its end the agent's certificate is replaced, shorter than --cert-validity (default a year, or a third of --cert-validity when shorter)")
	render.register(cmd)
	return cmd
}
