package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/unreachable"
)

// kubeFlags are the flags of commands that talk to a cluster.
type kubeFlags struct{ kubeconfig, context string }

func (f *kubeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&f.context, "context", "", "kubeconfig context (default: the current one)")
}

func (f *kubeFlags) client() (kubernetes.Interface, error) {
	cs, _, err := f.clientConfig()
	return cs, err
}

// clientConfig returns the client and the REST configuration it was made
// from (which a tunnel needs too).
func (f *kubeFlags) clientConfig() (kubernetes.Interface, *rest.Config, error) {
	rules, err := f.rules()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// client-go's default (5 requests/s) throttles init's and deploy's
	// short bursts of small requests; kubectl uses 50/300 too.
	cfg.QPS, cfg.Burst = 50, 300
	cs, err := kubernetes.NewForConfig(cfg)
	return cs, cfg, err
}

// maxKubeconfigSize bounds each kubeconfig file (1 MiB: one with a
// hundred clusters and their certificates is about 500 KiB).
const maxKubeconfigSize = 1 << 20

// rules are client-go's loading rules for the kubeconfig files f names
// (--kubeconfig, else $KUBECONFIG's, else ~/.kube/config), each checked
// first: client-go reads them whole, and would read /dev/zero or wait on
// a FIFO forever.
func (f *kubeFlags) rules() (*clientcmd.ClientConfigLoadingRules, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	files := rules.Precedence
	if f.kubeconfig != "" {
		files = []string{f.kubeconfig}
	}
	if f.kubeconfig != "" {
		// client-go would say "stat <path>: …".
		if _, err := os.Stat(f.kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", confine.Wrap(f.kubeconfig, err))
		}
	}
	for _, p := range files {
		if err := confine.CheckPath(p, maxKubeconfigSize); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	// The files a kubeconfig names (certificates, keys, tokens) are read
	// whole by client-go too.
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	var named []string
	for _, c := range raw.Clusters {
		named = append(named, c.CertificateAuthority)
	}
	for _, u := range raw.AuthInfos {
		named = append(named, u.ClientCertificate, u.ClientKey, u.TokenFile)
	}
	for _, p := range named {
		if p == "" {
			continue
		}
		if err := confine.CheckPath(p, maxKubeconfigSize); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	return rules, nil
}

// viaFlag is --registry-via: how the command reaches the in-cluster
// registry (package internal/cluster/reach).
type viaFlag struct{ via string }

func (f *viaFlag) register(cmd *cobra.Command, def reach.Via) {
	cmd.Flags().StringVar(&f.via, "registry-via", string(def), "how to reach the in-cluster registry: auto (the NodePort on 127.0.0.1 if it leads there, else a tunnel), nodeport (ferry runs on a node), tunnel (through the API server to a registry Pod: its pods/proxy, else a port-forward), port-forward (always a port-forward)")
}

func (f *viaFlag) parse() (reach.Via, error) {
	v, err := reach.ParseVia(f.via)
	if err != nil {
		return "", fmt.Errorf("--registry-via %w", err)
	}
	return v, nil
}

// open opens the way to the registry in namespace ns; nodeHost is the
// registry's address on the nodes when it is known (else the state says).
func (f *viaFlag) open(cmd *cobra.Command, cs kubernetes.Interface, cfg *rest.Config, ns, nodeHost, addr string) (*reach.Endpoint, error) {
	via, err := f.parse()
	if err != nil {
		return nil, err
	}
	return reach.Registry(cmd.Context(), cs, reach.Options{Via: via, Namespace: ns, Config: cfg, NodeHost: nodeHost, Addr: addr})
}

// defaultBinDir is where the binaries ferry ships into a cluster are: beside
// the ferry executable, as `make build` puts them in bin/.
func defaultBinDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}

func newInitCmd() *cobra.Command {
	var (
		kube      kubeFlags
		output    cli.OutputFlag
		opts      inject.InitOptions
		agentOpt  install.InstallOptions
		nodePort  int
		via       viaFlag
		storage   initStorageFlags
		keys      []string
		downgrade bool
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Bootstrap the in-cluster registry from ConfigMap chunks",
		Example: `  # Set up the current context's cluster, trusting one signing key for uploads
  ferry init --key cosign.pub

  # Keep the registry in an S3 bucket (credentials in the Secret ferry-s3), two replicas
  ferry init --storage 's3://ferry-registry?endpoint=https://minio.example.com&path-style=true' --storage-credentials ferry-s3 --replicas 2`,
		Long: `Bootstrap ferry's registry in a cluster that has none and no internet.

The registry image (ferry's own, one static binary, built for the node's
architecture) is carried in ConfigMap chunks with a two-stage injector; a Pod
borrowing an image already on a node serves it read-only on NodePort 31999
after checking its sha256; the registry Deployment pulls its image from
127.0.0.1:31999 by digest and takes the NodePort over; the injector's objects
are deleted. Credentials are generated once and kept in Secrets in the ferry
namespace. Then the agent, the admission webhook that rewrites every Pod's
images to the registry by digest (see ferry agent --help), is built from this
ferry binary (or ferry-linux-<arch> in --bin-dir for a node of another
architecture), pushed to the registry and deployed. Running init again checks
and repairs; it does not fail. A registry whose node is NotReady or gone is
moved to a Ready node (injected again; what it stored stays on the old node).

init runs on a node or on a workstation that reaches only the API server: the
agent's image is pushed through 127.0.0.1:<NodePort> when that leads to the
registry, else through a tunnel (--registry-via).

Storage: by default the registry runs one Pod on one node's filesystem
(--storage-dir). With --storage s3://bucket[/prefix]?endpoint=URL&region=R&path-style=true
it keeps everything in an S3-compatible object store through distribution's S3
driver and runs --replicas Pods (default 2) spread over the nodes, behind the
same NodePort, with a PodDisruptionBudget: losing a node loses nothing. The
credentials come from the Secret --storage-credentials names in the namespace
(keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; never a flag); init checks
them against the bucket before it changes anything. --storage-ca adds a PEM CA
bundle for the endpoint. Run again, init changes the replica count, or the
storage while no deployed package uses the registry, unless --migrate: then every repository is
copied from the node's filesystem to the bucket and every blob verified there
first (a Job on the registry's node; the registry serves pulls meanwhile).

init records which ferry set the cluster up and which ran init last, with the
generation of the formats it stores (ConfigMap ferry-version), and migrates a
cluster an older ferry set up. It refuses a cluster whose formats a newer ferry
wrote, unless --allow-downgrade.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := errors.Join(output.Validate(), agentOpt.Certificates.Validate()); err != nil {
				return err
			}
			cs, cfg, err := kube.clientConfig()
			if err != nil {
				return err
			}
			if opts.Via, err = via.parse(); err != nil {
				return err
			}
			opts.NodePort = int32(nodePort)
			var note string
			if opts.S3, opts.Replicas, note, err = storage.check(cmd.Context(), cs, opts.Namespace); err != nil {
				return fmt.Errorf("init: storage: %w", unreachable.Said(err))
			}
			opts.Migrate = storage.migrate
			if exe, err := os.Executable(); err == nil {
				agentOpt.Ferry = exe
			}
			v := cli.CurrentVersion()
			in := &install.Init{Client: cs, Config: cfg, Kube: kube.getter(), Registry: opts, Agent: agentOpt,
				Version: cluster.Ferry{Version: v.Version, Commit: v.Commit}, AllowDowngrade: downgrade}
			for _, k := range keys {
				pub, err := artifact.LoadPublicKey(k)
				if err != nil {
					return err
				}
				in.Keys = append(in.Keys, pub.PEM())
			}
			out := cmd.OutOrStdout()
			if !output.JSON() {
				in.Progress = func(s inject.Step) {
					fmt.Fprintf(out, "%-15s %s (%.1fs)\n", s.Name, s.Detail, s.Took.Seconds())
				}
				if note != "" {
					in.Progress(inject.Step{Name: "storage", Detail: note})
				}
			}
			res, err := in.Run(cmd.Context())
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(out, res)
			}
			fmt.Fprintf(out, "registry ready at %s (image %s), agent %s, in %.1fs\n", res.Registry, res.Image, res.Agent, res.Seconds)
			return nil
		},
	}
	kube.register(cmd)
	output.Register(cmd)
	cmd.Flags().StringVarP(&opts.Namespace, "namespace", "n", cluster.DefaultNamespace, "namespace for the registry and ferry's state")
	cmd.Flags().StringVar(&opts.BinDir, "bin-dir", defaultBinDir(), "folder with ferry-injector-linux-<arch>, ferry-registry-linux-<arch> (and ferry-linux-<arch> for the agent when this ferry is for another platform)")
	cmd.Flags().BoolVar(&agentOpt.RequireKnown, "require-known-images", false, "the agent refuses Pods with an image in no deployed package (instead of leaving it as it is)")
	cmd.Flags().IntVar(&nodePort, "node-port", cluster.DefaultNodePort, "NodePort of the registry on every node")
	cmd.Flags().DurationVar(&opts.WaitTimeout, "timeout", inject.DefaultWaitTimeout, "how long each waiting step may take")
	cmd.Flags().StringVar(&opts.StorageDir, "storage-dir", inject.DefaultStorageDir, "registry storage on its node (hostPath)")
	storage.register(cmd)
	via.register(cmd, reach.Auto)
	cmd.Flags().BoolVar(&downgrade, "allow-downgrade", false, "run on a cluster whose formats a newer ferry wrote (see the cluster's ConfigMap ferry-version); that ferry's objects may not read what this one writes")
	cmd.Flags().DurationVar(&agentOpt.Certificates.Validity, "cert-validity", 0, "how long a new certificate of the agent is valid (default 10 years)")
	cmd.Flags().DurationVar(&agentOpt.Certificates.RenewBefore, "cert-renew-before", 0, "how long before its end the controller replaces the agent's certificate (default a year, or a third of --cert-validity)")
	_, _ = cmd.Flags().MarkHidden("cert-validity"), cmd.Flags().MarkHidden("cert-renew-before") // for tests: minutes
	cmd.Flags().StringArrayVar(&keys, "key", nil, "public key (cosign.pub) the cluster trusts: stored in a Secret of ferry's namespace, it verifies uploads to the agent (deploy --via-agent, the dashboard), and packages deployed by an earlier ferry get Packages that name it (repeatable)")
	return cmd
}
