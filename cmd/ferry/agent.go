package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry/remote/auth"

	// The engine of imagesig.Policy.Verify, for the agent's Verifier.
	"github.com/ferrypkg/ferry/artifact"
	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/agent"
	"github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/deploy/upload"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/confine"
)

func newAgentCmd() *cobra.Command {
	var (
		kube                            kubeFlags
		namespace, registry, pullSecret string
		certFile, keyFile, addr         string
		tlsSecret                       string
		uploadDir                       string
		uploadMax                       int64
		requireKnown, verbose           bool
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the admission webhook that rewrites pod images (in the cluster; init deploys it)",
		Example: `  # As ferry init runs it in the cluster, with the certificate of its Service
  ferry agent --tls-cert /etc/ferry/tls/tls.crt --tls-key /etc/ferry/tls/tls.key

  # Refuse Pods whose images no deployed package carries
  ferry agent --tls-cert tls.crt --tls-key tls.key --require-known`,
		Long: `Run ferry's mutating admission webhook. ` + "`ferry init`" + ` deploys it in the ferry
namespace from ferry's own image, with a certificate from a CA it generates.

Every container, init container and ephemeral container image of a Pod is
rewritten to <registry>/<path>@sha256:<digest>, by the digests deployed
packages recorded (a tag is never trusted in the cluster), and the registry
pull secret is added (and copied into the Pod's namespace). Images in no
deployed package are left as they are, or refused with --require-known.
An image whose package names a signature policy for it is admitted only
when the signatures the package carried, read from the registry, satisfy
that policy; otherwise, or when they cannot be read, the Pod is refused.
Pods of ferry's namespace, and of namespaces labelled ` + install.IgnoreLabel + "=" + install.IgnoreValue + `,
are left alone. Whatever the agent cannot decide it refuses.

Outside a Pod, --kubeconfig (or $KUBECONFIG) names the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, cfg, err := agentClient(&kube)
			if err != nil {
				return err
			}
			pc, err := packageClient(cfg)
			if err != nil {
				return err
			}
			log := jsonLogger(cmd, verbose)
			state := &rollout.State{Client: cs, Namespace: namespace}
			cache := &agent.Cache{Source: state, Registry: registry, RequireKnown: requireKnown}
			go agent.WatchRecords(cmd.Context(), cs, namespace, rollout.LabelPackage, cache.Invalidate)
			copies := &agent.PullSecrets{Client: cs, Namespace: namespace, Name: pullSecret}
			wh := &agent.Webhook{
				Rewriter: cache.Rewriter, Refresh: cache.Refresh,
				PullSecret: pullSecret, EnsurePullSecret: copies.Ensure,
				Ignore: func(ns string) bool { return ns == namespace || ns == install.SystemNamespace },
				Logger: log,
				Sources: func(ctx context.Context) (*agent.SourceRewriter, error) {
					return sourceRewriter(ctx, cs, state, namespace)
				},
				EnsureSecret: func(ctx context.Context, ns, name string) error {
					return (&agent.PullSecrets{Client: cs, Namespace: namespace, Name: name}).Ensure(ctx, ns)
				},
				EnsureHelmRepository: (&agent.HelmRepositories{Client: cs, Namespace: namespace}).Ensure,
				Verifier: &agent.Verifier{Repository: func(ctx context.Context, path string) (agent.Repository, error) {
					return registryRepository(ctx, cs, namespace, path)
				}},
			}
			up := &upload.Server{Client: cs, Packages: pc, Namespace: namespace, Dir: uploadDir, MaxBytes: uploadMax, Logger: log}
			// The key pair is checked before the agent says it serves.
			cert, err := confine.LoadKeyPair(certFile, keyFile)
			if err != nil {
				return fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			log.Info("serving", "addr", addr, "namespace", namespace, "registry", registry, "requireKnown", requireKnown, "uploads", uploadDir)
			// The fleet member's loop: idle until `ferry fleet join`
			// writes its Secret.
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			fleet := &member.Agent{Client: cs, Packages: pc, Namespace: namespace, Spool: uploadDir, MaxBundle: uploadMax,
				Version: cli.CurrentVersion().Version, Logger: log}
			go func() { _ = fleet.Run(ctx) }()
			certs := servingcert.NewSource(cert)
			go certs.Watch(ctx, cs, namespace, tlsSecret, log) // none without --tls-secret
			err = agent.Serve(ctx, wh, agent.ServeOptions{
				Addr: addr, GetCertificate: certs.GetCertificate, Logger: log,
				Handlers: map[string]http.Handler{upload.Path: up},
				Ready:    func(ctx context.Context) error { _, err := cache.Rewriter(ctx); return err },
			})
			if err == nil {
				log.Info("stopped")
			}
			return err
		},
	}
	kube.register(cmd)
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace: deployed packages, the pull secret; its Pods are left alone")
	f.StringVar(&registry, "registry", cluster.RegistryHost(cluster.DefaultNodePort), "the in-cluster registry, as every node reaches it")
	f.StringVar(&pullSecret, "pull-secret", cluster.PullSecretName, "the registry pull secret in ferry's namespace, added to Pods")
	f.StringVar(&certFile, "tls-cert", "", "serving certificate (PEM)")
	f.StringVar(&keyFile, "tls-key", "", "serving key (PEM)")
	f.StringVar(&tlsSecret, "tls-secret", "", "serve the certificate this kubernetes.io/tls Secret of --namespace holds, kept current through the API (a rotated certificate is served without a restart); --tls-cert and --tls-key until it is read")
	f.StringVar(&addr, "addr", agent.DefaultAddr, "address to serve HTTPS on ("+cluster.AgentPathMutate+", "+cluster.AgentPathHealth+")")
	f.StringVar(&uploadDir, "upload-dir", "", "where uploaded packages are spooled while verified and pushed (default: the temporary directory)")
	f.Int64Var(&uploadMax, "upload-max-bytes", 0, "refuse uploads, and fleet bundles, larger than this (0: no bound but the disk's)")
	f.BoolVar(&requireKnown, "require-known", false, "refuse Pods with an image in no deployed package")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every review, not only rewrites and refusals")
	_ = cmd.MarkFlagRequired("tls-cert")
	_ = cmd.MarkFlagRequired("tls-key")
	return cmd
}

// newAgentProbeCmd is `ferry agent-probe`, hidden (a subcommand of
// agent would change how agent's own arguments are parsed): the agent container's
// postStart hook. The kubelet reports the container running only after
// it, and then probes its readiness at once; without the hook that first
// probe found the agent still starting and Ready waited a period (1 s).
// It waits, up to --wait, until /healthz here answers 200, and always
// exits 0: the readiness probe, not the hook, judges the agent.
func newAgentProbeCmd() *cobra.Command {
	var (
		addr string
		wait time.Duration
	)
	cmd := &cobra.Command{
		Use:    "agent-probe",
		Short:  "Wait until the agent here answers its health check (its container's postStart hook)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The agent's own address on loopback; its certificate names
			// the Service, and nothing is sent: not verified.
			client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				resp, err := client.Get("https://" + addr + cluster.AgentPathHealth)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1"+agent.DefaultAddr, "the agent's address")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait at most")
	return cmd
}

// agentClient uses the Pod's service account in a cluster, unless a
// kubeconfig is named.
func agentClient(kube *kubeFlags) (kubernetes.Interface, *rest.Config, error) {
	if kube.kubeconfig == "" && kube.context == "" && os.Getenv("KUBECONFIG") == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("in-cluster config (outside a Pod, pass --kubeconfig): %w", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		return cs, cfg, err
	}
	return kube.clientConfig()
}

// registryRepository is how the agent reads the in-cluster registry (the
// evidence of signed images): through its Service, with its account.
func registryRepository(ctx context.Context, cs kubernetes.Interface, namespace, path string) (agent.Repository, error) {
	host, err := kube.ServiceHost(ctx, cs, namespace, cluster.RegistryName)
	if err != nil {
		return nil, fmt.Errorf("the registry: %w", err)
	}
	_, cred, err := rollout.RegistryAccess(ctx, cs, namespace)
	if err != nil {
		return nil, fmt.Errorf("the registry's account: %w", err)
	}
	return artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred), Client: reach.RegistryClient()}.Repository(host + "/" + path)
}

// sourceRewriter reads what the agent's rewrite of GitOps sources needs,
// at each request (sources change seldom): the carried repositories and
// images, and where Pods reach the git server and the registry.
func sourceRewriter(ctx context.Context, cs kubernetes.Interface, state *rollout.State, namespace string) (*agent.SourceRewriter, error) {
	repos, err := state.Repositories(ctx)
	if err != nil {
		return nil, err
	}
	images, err := state.Images(ctx)
	if err != nil {
		return nil, err
	}
	s := &agent.SourceRewriter{Repositories: repos, Images: images, GitSecret: install.GitSecretName, ArgoSecret: install.GitCredsSecretName, PullSecret: install.SourceRegistrySecretName}
	if len(repos) == 0 && len(images) == 0 {
		return s, nil
	}
	if s.Registry, err = kube.ServiceHost(ctx, cs, namespace, cluster.RegistryName); err != nil {
		return nil, err
	}
	if len(repos) == 0 {
		return s, nil
	}
	git, err := kube.ServiceHost(ctx, cs, namespace, install.GitName)
	if err != nil {
		return nil, err
	}
	s.GitBase = cluster.GitBaseURL(git)
	return s, nil
}
