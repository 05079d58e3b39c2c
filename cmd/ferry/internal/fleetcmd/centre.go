package fleetcmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcluster "sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// The fleet's commands: those of the centre act on the management
// cluster (--kubeconfig names it), those of a member (join, status,
// report: fleet_member.go) on the member's.
func newFleetCmd() *cobra.Command {
	cmd := cli.GroupCmd(&cobra.Command{
		Use:   "fleet",
		Short: "Run a fleet of clusters from one centre: members dial out, carried sites by files",
		Example: `  # at the centre
  ferry fleet serve --kubeconfig mgmt.yaml --registry registry.example:5000 --host centre.example
  ferry fleet token create --uses 10
  # on a member
  ferry fleet join https://centre.example:8443 --token ff1.… --label env=prod`,
		Long: `A fleet is one centre (` + "`ferry fleet serve`" + `, its state as objects of a management
cluster) and its members: connected clusters whose agent dials out to the centre
and deploys what is placed on them, and carried sites that exchange signed reports
and carry bundles as files. A member installs only what its own keys verify.
See docs/fleet.md.`,
	})
	cmd.AddCommand(newFleetServeCmd(), newFleetTokenCmd(), newFleetMembersCmd(), newFleetRevokeCmd(),
		newFleetGroupCmd(), newFleetPromoteCmd(), newFleetPlaceCmd(), newFleetRolloutsCmd(), newFleetRollbackCmd(),
		newFleetImportCmd(), newFleetBundleCmd(),
		newFleetJoinCmd(), newFleetStatusCmd(), newFleetReportCmd())
	return cmd
}

// centreFlags are the flags of every centre command.
type centreFlags struct {
	kube      Kube
	namespace string
}

func (f *centreFlags) register(cmd *cobra.Command) {
	f.kube = deps.Kube(cmd)
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", centre.DefaultNamespace, "the centre's namespace in the management cluster")
}

// fleetScheme knows the core and the fleet's types.
func fleetScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// centreOf is a Centre over the management cluster that f names.
func (f *centreFlags) centreOf() (*centre.Centre, *rest.Config, error) {
	_, cfg, err := f.kube.ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	deps.QuietClients()
	s, err := fleetScheme()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, nil, fmt.Errorf("the management cluster: %w", err)
	}
	return &centre.Centre{Client: c, Namespace: f.namespace}, cfg, nil
}

// whoAmI is the management cluster's name for the user (what a rollout's
// history records as by).
func whoAmI(ctx context.Context, cfg *rest.Config) string {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ""
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return ""
	}
	return r.Status.UserInfo.Username
}

func newFleetServeCmd() *cobra.Command {
	var (
		f        centreFlags
		addr     string
		hosts    []string
		reg      registryFlags
		spool    string
		interval time.Duration
		noCRDs   bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the fleet's centre: the members' HTTPS endpoint and the rollout engine",
		Example: `  # The centre, its state in the management cluster, packages in its registry
  ferry fleet serve --kubeconfig mgmt.yaml --registry registry.example:5000 --addr :8443 --host centre.example`,
		Long: `Serve the fleet's centre. Its state is the fleet.ferry.dev objects of the
management cluster's namespace (-n); their CRDs are applied first. Its CA is made
on first start (Secret ferry-fleet-ca) and pinned by every join token; --host
names the addresses members reach it by (the certificate's names).
Packages come from --registry, where ` + "`ferry package push`" + ` puts them; each member gets
the delta from what its registry holds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, cfg, err := f.centreOf()
			if err != nil {
				return err
			}
			if err := reg.set(cmd, c, "the registry the tracks' packages are in"); err != nil {
				return err
			}
			if interval < member.MinInterval || interval > member.MaxInterval {
				return fmt.Errorf("--interval %s: members keep a heartbeat of %s to %s", interval, member.MinInterval, member.MaxInterval)
			}
			c.Interval, c.Logger = interval, deps.Logger(cmd)
			if spool == "" {
				if spool, err = os.MkdirTemp("", "ferry-fleet-"); err != nil {
					return err
				}
				defer os.RemoveAll(spool)
			}
			c.Spool = spool
			if !noCRDs {
				ext, err := clientset.NewForConfig(cfg)
				if err != nil {
					return err
				}
				if err := c.EnsureCRDs(ctx, ext); err != nil {
					return err
				}
			}
			// Reads from a cache of the namespace's objects (every request
			// reads its Member; every sync the groups, tracks and
			// placements), writes and fresh reads to the API server.
			s, err := fleetScheme()
			if err != nil {
				return err
			}
			// The centre is the API server's main client of the fleet's
			// objects: a rollout's start writes every member's status.
			cfg = rest.CopyConfig(cfg)
			cfg.QPS, cfg.Burst = 500, 1000
			mgmt, err := ctrlcluster.New(cfg, func(o *ctrlcluster.Options) {
				o.Scheme = s
				o.Cache.DefaultNamespaces = map[string]cache.Config{c.Namespace: {}}
			})
			if err != nil {
				return fmt.Errorf("the management cluster: %w", err)
			}
			go mgmt.Start(ctx)
			if !mgmt.GetCache().WaitForCacheSync(ctx) {
				return errors.New("the management cluster: its cache did not fill")
			}
			c.Client, c.APIReader = mgmt.GetClient(), mgmt.GetAPIReader()
			if err := c.EnsureNamespace(ctx); err != nil {
				return err
			}
			caPEM, cert, err := c.EnsureCA(ctx, hosts)
			if err != nil {
				return err
			}
			pin, err := wire.CAPin(caPEM)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			// ReadTimeout bounds a slow sender (a bundle request carries up to
			// 64 MiB of receipt); no WriteTimeout: a bundle streams for as
			// long as it takes.
			srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute,
				TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}}
			errc := make(chan error, 2)
			go func() { errc <- c.Run(ctx) }()
			go func() { errc <- srv.ServeTLS(ln, "", "") }()
			fmt.Fprintf(cmd.OutOrStdout(), "serving the fleet at https://%s (CA sha256:%s)\n", ln.Addr(), pin)
			select {
			case <-ctx.Done():
			case err = <-errc:
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&addr, "addr", ":8443", "where to listen (HTTPS)")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "a name or address members reach the centre by (repeatable; in its certificate)")
	reg.register(cmd, "the centre's registry (host[:port]): the tracks' packages")
	cmd.Flags().StringVar(&spool, "spool", "", "folder for packages pulled and bundles being written (default: a temporary one)")
	cmd.Flags().DurationVar(&interval, "interval", wire.DefaultInterval, "the members' heartbeat")
	cmd.Flags().BoolVar(&noCRDs, "no-crds", false, "do not apply the fleet's CRDs (they are applied already)")
	return cmd
}

func newFleetTokenCmd() *cobra.Command {
	cmd := cli.GroupCmd(&cobra.Command{Use: "token", Short: "Make join tokens",
		Example: `  ferry fleet token create --ttl 24h --uses 1 --label env=prod`})
	var (
		f      centreFlags
		output cli.OutputFlag
		ttl    time.Duration
		uses   int
		labels []string
		desc   string
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a join token (it pins the centre's CA; shown once)",
		Example: `  ferry fleet token create --ttl 24h --uses 1 --label env=prod
  ferry fleet token create --uses 50 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			tok, err := c.CreateToken(cmd.Context(), centre.TokenOptions{TTL: ttl, Uses: uses, Labels: l, Description: desc})
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]any{"token": tok.String(), "id": tok.ID, "expires": time.Now().Add(ttl).UTC(), "uses": uses})
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok.String())
			return nil
		},
	}
	f.register(create)
	output.Register(create)
	create.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token may be used")
	create.Flags().IntVar(&uses, "uses", 1, "how many members may join with it")
	create.Flags().StringArrayVar(&labels, "label", nil, "a label (k=v) every member joining with it gets (repeatable)")
	create.Flags().StringVar(&desc, "description", "", "what the token is for")
	cmd.AddCommand(create)
	return cmd
}

// parseLabels reads k=v pairs.
func parseLabels(in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// memberRow is one member as `fleet members` shows it.
type memberRow struct {
	Name     string                   `json:"name"`
	Mode     string                   `json:"mode"`
	Labels   map[string]string        `json:"labels,omitempty"`
	LastSeen *metav1.Time             `json:"lastSeen,omitempty"`
	Ready    string                   `json:"ready"`
	Stale    bool                     `json:"stale"`
	Revoked  bool                     `json:"revoked"`
	Packages []v1alpha1.MemberPackage `json:"packages"`
}

func newFleetMembersCmd() *cobra.Command {
	var (
		f      centreFlags
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:     "members",
		Short:   "List the fleet's members: mode, last seen, packages and their state",
		Example: `  ferry fleet members --kubeconfig mgmt.yaml -o json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			var list v1alpha1.MemberList
			if err := c.Client.List(cmd.Context(), &list, client.InNamespace(f.namespace)); err != nil {
				return fmt.Errorf("list the members: %w", err)
			}
			rows := make([]memberRow, 0, len(list.Items))
			for _, m := range list.Items {
				r := memberRow{Name: m.Name, Mode: m.Spec.Mode, Labels: m.Labels, LastSeen: m.Status.LastSeen, Revoked: m.Spec.Revoked, Packages: m.Status.Packages, Ready: "Unknown"}
				if cond := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.MemberReady); cond != nil {
					r.Ready = string(cond.Status)
				}
				r.Stale = meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.MemberStale)
				if r.Packages == nil {
					r.Packages = []v1alpha1.MemberPackage{}
				}
				rows = append(rows, r)
			}
			sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MEMBER\tMODE\tREADY\tLAST SEEN\tPACKAGES")
			for _, r := range rows {
				state := r.Ready
				switch {
				case r.Revoked:
					state = "Revoked"
				case r.Stale:
					state += " (stale)"
				}
				seen := "never"
				if r.LastSeen != nil {
					seen = time.Since(r.LastSeen.Time).Round(time.Second).String() + " ago"
				}
				var pk []string
				for _, p := range r.Packages {
					s := p.Name + "@" + orDash(p.Version)
					switch {
					case p.Refused:
						s += " refused " + p.Reason
					case !p.Ready:
						s += " not ready"
					}
					pk = append(pk, s)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Mode, state, seen, strings.Join(pk, ", "))
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	output.Register(cmd)
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newFleetRevokeCmd() *cobra.Command {
	var (
		f      centreFlags
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:     "revoke MEMBER",
		Short:   "Cut a member off: its next request is refused",
		Example: `  ferry fleet revoke site-7`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			if err := c.Revoke(cmd.Context(), args[0]); err != nil {
				return err
			}
			return say(cmd, output, map[string]any{"member": args[0], "revoked": true}, "revoked "+args[0])
		},
	}
	f.register(cmd)
	output.Register(cmd)
	return cmd
}

// say prints v as JSON with -o json, else the line text.
func say(cmd *cobra.Command, output cli.OutputFlag, v any, text string) error {
	if output.JSON() {
		return cli.WriteJSON(cmd.OutOrStdout(), v)
	}
	_, err := fmt.Fprintln(cmd.OutOrStdout(), text)
	return err
}
