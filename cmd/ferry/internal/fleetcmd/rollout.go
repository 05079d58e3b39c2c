package fleetcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

func newFleetGroupCmd() *cobra.Command {
	var (
		f        centreFlags
		output   cli.OutputFlag
		selector string
	)
	cmd := &cobra.Command{
		Use:   "group NAME --selector LABELS",
		Short: "Make or change a group of members, by a label selector",
		Example: `  ferry fleet group prod --selector env=prod
  ferry fleet group ships --selector 'site in (ship-1,ship-2)'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			sel, err := metav1.ParseToLabelSelector(selector)
			if err != nil {
				return fmt.Errorf("--selector %q: %w", selector, err)
			}
			g := &v1alpha1.MemberGroup{ObjectMeta: metav1.ObjectMeta{Name: args[0], Namespace: f.namespace}}
			_, err = controllerutil.CreateOrUpdate(cmd.Context(), c.Client, g, func() error {
				g.Spec.Selector = *sel
				return nil
			})
			if err != nil {
				return fmt.Errorf("group %s: %w", args[0], err)
			}
			return say(cmd, output, g, fmt.Sprintf("group %s selects %s", args[0], selector))
		},
	}
	f.register(cmd)
	output.Register(cmd)
	cmd.Flags().StringVar(&selector, "selector", "", "a label selector (kubectl's syntax); empty selects every member")
	return cmd
}

func newFleetPromoteCmd() *cobra.Command {
	var (
		f          centreFlags
		output     cli.OutputFlag
		repository string
		pkgName    string
		reg        registryFlags
	)
	cmd := &cobra.Command{
		Use:   "promote TRACK CHANNEL DIGEST|TAG",
		Short: "Put a version of a track's package on a channel (placements following it roll out)",
		Example: `  # A new track of the package pushed to the centre's registry as apps/shop
  ferry fleet promote shop beta 1.4.0 --repository apps/shop --registry registry.example:5000
  ferry fleet promote shop stable sha256:4f2a…`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, cfg, err := f.centreOf()
			if err != nil {
				return err
			}
			if err := reg.set(cmd, c, ""); err != nil {
				return err
			}
			ctx := cmd.Context()
			if repository != "" {
				if err := ensureTrack(ctx, c, args[0], repository, pkgName); err != nil {
					return err
				}
			}
			tr, err := c.Promote(ctx, args[0], args[1], args[2], whoAmI(ctx, cfg))
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), tr)
			}
			for _, ch := range tr.Spec.Channels {
				if ch.Name == args[1] {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s %s\n", args[0], ch.Name, orDash(ch.Version), ch.Digest)
				}
			}
			return nil
		},
	}
	f.register(cmd)
	output.Register(cmd)
	cmd.Flags().StringVar(&repository, "repository", "", "the package's repository in the centre's registry (makes the track if it is new)")
	cmd.Flags().StringVar(&pkgName, "package", "", "the package's own name, if the track is new: a version of another package is refused (members name the Package after the package itself)")
	reg.register(cmd, "the centre's registry, to read the version's name and version (host[:port])")
	return cmd
}

// ensureTrack makes the track if it is new; an existing one must name the
// same repository.
func ensureTrack(ctx context.Context, c *centre.Centre, name, repository, pkgName string) error {
	tr := &v1alpha1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	err := c.Client.Get(ctx, client.ObjectKeyFromObject(tr), tr)
	switch {
	case apierrors.IsNotFound(err):
		tr.Spec = v1alpha1.ReleaseTrackSpec{Repository: repository, Package: pkgName}
		if err := c.Client.Create(ctx, tr); err != nil {
			return fmt.Errorf("track %s: %w", name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("track %s: %w", name, err)
	case tr.Spec.Repository != repository:
		return fmt.Errorf("track %s is of repository %s, not %s", name, tr.Spec.Repository, repository)
	}
	return nil
}

func newFleetPlaceCmd() *cobra.Command {
	var (
		f            centreFlags
		output       cli.OutputFlag
		track        string
		channel      string
		digest       string
		groups       []string
		set          []string
		components   []string
		timeout      time.Duration
		canaries     int32
		waveFraction int32
		readyTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "place NAME --track TRACK (--channel C | --digest D) --group G [--set k=v]",
		Short: "Place a track's channel (or a pinned version) on groups of members",
		Example: `  ferry fleet place shop-prod --track shop --channel stable --group prod --set replicas=3
  # another group's values: --group NAME=k=v,k2=v2
  ferry fleet place shop --track shop --channel beta --group lab --group ships=replicas=1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			if len(groups) == 0 {
				return errors.New("--group is required: the groups the package goes to")
			}
			common, err := deploy.ParseSet(set)
			if err != nil {
				return err
			}
			var targets []v1alpha1.PlacementTarget
			for _, g := range groups {
				name, vals, _ := strings.Cut(g, "=")
				values := map[string]any{}
				for k, v := range common {
					values[k] = v
				}
				if vals != "" {
					own, err := deploy.ParseSet(strings.Split(vals, ","))
					if err != nil {
						return fmt.Errorf("--group %s: %w", g, err)
					}
					for k, v := range own {
						values[k] = v
					}
				}
				t := v1alpha1.PlacementTarget{Group: name}
				if len(values) > 0 {
					raw, err := json.Marshal(values)
					if err != nil {
						return err
					}
					t.Values = &apiextensionsv1.JSON{Raw: raw}
				}
				targets = append(targets, t)
			}
			spec := v1alpha1.PlacementSpec{Track: track, Channel: channel, Digest: digest, Targets: targets, Components: components}
			if timeout > 0 {
				spec.Timeout = &metav1.Duration{Duration: timeout}
			}
			if cmd.Flags().Changed("canaries") {
				spec.Strategy.Canaries = &canaries
			}
			spec.Strategy.WaveFraction = waveFraction
			if readyTimeout > 0 {
				spec.Strategy.ReadyTimeout = &metav1.Duration{Duration: readyTimeout}
			}
			p := &v1alpha1.Placement{ObjectMeta: metav1.ObjectMeta{Name: args[0], Namespace: f.namespace}}
			_, err = controllerutil.CreateOrUpdate(cmd.Context(), c.Client, p, func() error {
				p.Spec = spec
				return nil
			})
			if err != nil {
				return fmt.Errorf("placement %s: %w", args[0], err)
			}
			return say(cmd, output, p, fmt.Sprintf("placement %s: track %s on %s", args[0], track, strings.Join(groups, ", ")))
		},
	}
	f.register(cmd)
	output.Register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&track, "track", "", "the release track")
	fl.StringVar(&channel, "channel", "", "the track's channel to follow")
	fl.StringVar(&digest, "digest", "", "a version to pin instead (sha256:…)")
	fl.StringArrayVar(&groups, "group", nil, "a group it goes to, NAME or NAME=k=v,… with that group's own values (repeatable)")
	fl.StringArrayVar(&set, "set", nil, "a value every group's members get (helm --set syntax; repeatable)")
	fl.StringSliceVar(&components, "components", nil, "the package's components (default all)")
	fl.DurationVar(&timeout, "timeout", 0, "each chart's wait at a member (default 5m)")
	fl.Int32Var(&canaries, "canaries", 1, "members that go first when none is labelled "+v1alpha1.LabelCanary+"=true")
	fl.Int32Var(&waveFraction, "wave-fraction", 25, "the percentage of members each later wave takes")
	fl.DurationVar(&readyTimeout, "ready-timeout", 10*time.Minute, "how long a wave waits for each member to be Ready")
	return cmd
}

func newFleetRolloutsCmd() *cobra.Command {
	var (
		f      centreFlags
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "rollouts [PLACEMENT]",
		Short: "Show placements: their rollout in progress, each member's state, and their history",
		Example: `  ferry fleet rollouts
  ferry fleet rollouts shop-prod -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			var list v1alpha1.PlacementList
			if err := c.Client.List(cmd.Context(), &list, client.InNamespace(f.namespace)); err != nil {
				return fmt.Errorf("list the placements: %w", err)
			}
			items := list.Items
			if len(args) == 1 {
				items = nil
				for _, p := range list.Items {
					if p.Name == args[0] {
						items = append(items, p)
					}
				}
				if len(items) == 0 {
					return fmt.Errorf("no placement %s in namespace %s", args[0], f.namespace)
				}
			}
			if output.JSON() {
				if items == nil {
					items = []v1alpha1.Placement{}
				}
				return cli.WriteJSON(cmd.OutOrStdout(), items)
			}
			w := cmd.OutOrStdout()
			for _, p := range items {
				fmt.Fprintf(w, "%s: track %s, %s %s, wave %d", p.Name, p.Spec.Track, orDash(p.Status.Phase), orDash(p.Status.Version), p.Status.Wave)
				if p.Status.Message != "" {
					fmt.Fprintf(w, ": %s", p.Status.Message)
				}
				fmt.Fprintln(w)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, m := range p.Status.Members {
					fmt.Fprintf(tw, "  %s\twave %d\t%s\t%s\t%s\n", m.Name, m.Wave, m.State, short(m.Target), m.Message)
				}
				tw.Flush()
				for _, h := range p.Status.History {
					fmt.Fprintf(w, "  %s %s %s → %s by %s: %s\n", h.Started.UTC().Format(time.RFC3339), h.Action, short(h.From), short(h.To), orDash(h.By), h.Result)
				}
			}
			return nil
		},
	}
	f.register(cmd)
	output.Register(cmd)
	return cmd
}

// short is a digest's first 12 hex digits.
func short(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return orDash(d)
}

func newFleetRollbackCmd() *cobra.Command {
	var (
		f      centreFlags
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:     "rollback PLACEMENT",
		Short:   "Return a placement's members to its previous version (pins it; all at once)",
		Example: `  ferry fleet rollback shop-prod`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, cfg, err := f.centreOf()
			if err != nil {
				return err
			}
			p, err := c.Rollback(cmd.Context(), args[0], whoAmI(cmd.Context(), cfg))
			if err != nil {
				return err
			}
			return say(cmd, output, p, fmt.Sprintf("placement %s pinned to %s", p.Name, p.Spec.Digest))
		},
	}
	f.register(cmd)
	output.Register(cmd)
	return cmd
}
