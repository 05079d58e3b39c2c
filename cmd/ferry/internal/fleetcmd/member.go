package fleetcmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// A member's fleet commands: they act on the member's own cluster.

func newFleetJoinCmd() *cobra.Command {
	var (
		kube      Kube
		output    cli.OutputFlag
		namespace string
		token     string
		name      string
		labels    []string
		force     bool
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:     "join URL --token TOKEN",
		Short:   "Make this cluster a member of a fleet: its agent dials out to the centre at URL",
		Example: `  ferry fleet join https://centre.example:8443 --token ff1.… --name plant-3 --label env=prod`,
		Long: `Give this cluster's agent the centre's URL and a join token. The agent connects
out to the centre, trusting only the CA whose SHA-256 the token carries, trades the
token for a credential of its own, and from then on deploys what the centre places
on it (verified with this cluster's own trusted keys) and reports back. The centre
never reaches into the cluster. This waits until the agent has joined.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			cs, err := kube.Client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := member.WriteJoin(ctx, cs, namespace, member.Config{URL: args[0], Token: token, Name: name, Labels: l, Mode: v1alpha1.Connected, Force: force}); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := member.WaitJoined(wctx, cs, namespace)
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), st)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "joined the fleet at %s as %s\n", st.URL, st.Member)
			return nil
		},
	}
	kube = deps.Kube(cmd)
	output.Register(cmd)
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	f.StringVar(&token, "token", "", "the join token (`ferry fleet token create` at the centre)")
	f.StringVar(&name, "name", "", "the member's name (a DNS label; default: the centre names it)")
	f.StringArrayVar(&labels, "label", nil, "a label (k=v) the centre's groups select the member by (repeatable)")
	f.BoolVar(&force, "force", false, "join again, replacing the identity of a member that joined already")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the agent to join")
	return cmd
}

func newFleetStatusCmd() *cobra.Command {
	var (
		kube      Kube
		output    cli.OutputFlag
		namespace string
	)
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show this cluster's membership: centre, name, last sync, last error",
		Example: `  ferry fleet status -o json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			cs, err := kube.Client()
			if err != nil {
				return err
			}
			st, err := member.ReadStatus(cmd.Context(), cs, namespace)
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), st)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "member %s (%s) of %s: joined %v\n", orDash(st.Member), st.Mode, orDash(st.URL), st.Joined)
			if !st.LastSync.IsZero() {
				fmt.Fprintf(w, "last sync %s ago\n", time.Since(st.LastSync).Round(time.Second))
			}
			if st.Error != "" {
				fmt.Fprintf(w, "last error: %s\n", st.Error)
			}
			return nil
		},
	}
	kube = deps.Kube(cmd)
	output.Register(cmd)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	return cmd
}

func newFleetReportCmd() *cobra.Command {
	var (
		kube      Kube
		output    cli.OutputFlag
		file      cli.FileFlag
		namespace string
		token     string
		name      string
		labels    []string
		openReg   OpenRegistry
	)
	cmd := &cobra.Command{
		Use:   "report -f FILE",
		Short: "Write this cluster's signed report for the centre (a carried site's way in)",
		Example: `  # a site's first report registers it (a token from the centre)
  ferry fleet report -f site-report.json --token ff1.… --name ship-9 --label env=prod
  ferry fleet report -f site-report.json`,
		Long: `Write a report of this cluster — its Packages' versions and states, and a receipt
of what its registry holds — signed with the site's key (made on first use and kept
in the Secret ferry-fleet). Carry it to the centre: ` + "`ferry fleet import`" + `. The first report
of a site carries its public key and a join token, and registers it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if file.Path == "" {
				return fmt.Errorf("-f is required: the report to write")
			}
			if err := file.Validate(""); err != nil {
				return err
			}
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			cs, cfg, err := kube.ClientConfig()
			if err != nil {
				return err
			}
			pc, err := deps.PackageClient(cfg)
			if err != nil {
				return err
			}
			// What its registry holds, reached as deploy reaches it.
			reg, cause, done, err := openReg(cmd, cs, cfg, namespace)
			if err != nil {
				return err
			}
			defer done()
			res, err := member.WriteReport(cmd.Context(), cs, pc, namespace, reg, file.Path,
				member.ReportFileOptions{Token: token, Name: name, Labels: l, Agent: cli.CurrentVersion().Version})
			if err != nil {
				return cause(err)
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", file.Path)
			return nil
		},
	}
	kube = deps.Kube(cmd)
	output.Register(cmd)
	file.Register(cmd, "the report to write (JSON)")
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	f.StringVar(&token, "token", "", "a join token, for the site's first report")
	f.StringVar(&name, "name", "", "the site's name, for its first report")
	f.StringArrayVar(&labels, "label", nil, "a label (k=v) for its first report (repeatable)")
	openReg = deps.Registry(cmd)
	return cmd
}
