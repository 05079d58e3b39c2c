package main

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy"
)

func newFindImagesCmd() *cobra.Command {
	var (
		write, check bool
		set          []string
		kubeVersion  string
		remote       cli.RemoteFlags
		output       cli.OutputFlag
		render       renderFlags
	)
	cmd := &cobra.Command{
		Use:   "find-images [DIR|ferry.yaml]",
		Short: "List the images a definition's charts and manifests use, and those it lacks",
		Example: `  # Which images do the charts of ./app run that its ferry.yaml does not list?
  ferry package find-images ./app

  # Add them to ferry.yaml (comments and order kept)
  ferry package find-images ./app --write

  # In CI: fail when an image is missing
  ferry package find-images ./app --check -o json`,
		Long: `Render every chart of every component of a ferry.yaml as deploy installs it
(Helm's SDK, without a cluster, as helm template does: hooks and CRDs
included, the chart's default values and --set), read the component's
manifests, and list the images they use, per component: missing (used, not
listed), unused (listed, not used) and present. Images are those of the
containers of workloads, and the string fields named image of custom
resources. Images that only test hooks (helm.sh/hook: test) use are shown
apart and never added.

--write adds the missing images to the components' images in ferry.yaml,
keeping its comments and order. --check exits 1 when an image is missing.

Charts are loaded and rendered in a child process, each within
--render-memory and --render-timeout, and to at most 64 MiB of manifests: a
chart past a limit is refused, naming it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			charts, err := render.renderer()
			if err != nil {
				return err
			}
			defer charts.Close()
			src := "."
			if len(args) == 1 {
				src = args[0]
			}
			def, err := definition.Load(src)
			if err != nil {
				return err
			}
			values, err := deploy.ParseSet(set)
			if err != nil {
				return err
			}
			ro, err := remote.Options(cmd, "")
			if err != nil {
				return err
			}
			found, err := build.FindImages(cmd.Context(), def, build.FindImagesOptions{
				Charts: charts, Render: charts, Remote: ro, Values: values, KubeVersion: kubeVersion,
			})
			if err != nil {
				return renderAdvice(err)
			}
			missing := map[string][]string{}
			n := 0
			for _, c := range found.Components {
				if len(c.Missing) > 0 {
					missing[c.Name] = c.Missing
					n += len(c.Missing)
				}
			}
			if write && n > 0 {
				if err := definition.AddImagesToFile(def.File, missing); err != nil {
					return err
				}
			}
			if output.JSON() {
				err = cli.WriteJSON(cmd.OutOrStdout(), map[string]any{
					"definition": def.File, "components": found.Components, "missing": n, "written": write && n > 0,
				})
			} else {
				printFound(cmd, def, found, n, write)
			}
			if err == nil && check && n > 0 && !write {
				err = fmt.Errorf("%s lacks %s that its charts and manifests use (find-images --write adds them)", def.File, plural(n, "image"))
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&write, "write", false, "add the missing images to ferry.yaml")
	cmd.Flags().BoolVar(&check, "check", false, "exit 1 when an image is missing (unless --write added it)")
	cmd.Flags().StringArrayVar(&set, "set", nil, "chart value KEY=VALUE, as helm --set and deploy --set (repeatable; given to every chart)")
	cmd.Flags().StringVar(&kubeVersion, "kube-version", build.DefaultKubeVersion, "the Kubernetes version charts are rendered for (.Capabilities.KubeVersion)")
	remote.RegisterTLS(cmd)
	output.Register(cmd)
	render.register(cmd)
	return cmd
}

// printFound prints what find-images found, component by component.
func printFound(cmd *cobra.Command, def *definition.Definition, found *build.FoundImages, missing int, written bool) {
	out := cmd.OutOrStdout()
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	for _, c := range found.Components {
		where := map[string]string{}
		for _, i := range c.Images {
			w := i.Where[0]
			if len(i.Where) > 1 {
				w += fmt.Sprintf(" and %d more", len(i.Where)-1)
			}
			where[i.Ref] = w
		}
		fmt.Fprintf(tw, "component %s\n", c.Name)
		rows := []struct {
			what string
			refs []string
		}{{"missing", c.Missing}, {"unused", c.Unused}, {"present", c.Present}, {"test only", c.Test}}
		for _, r := range rows {
			for _, ref := range r.refs {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.what, ref, where[ref])
			}
		}
		if len(c.Images)+len(c.Unused)+len(c.Present) == 0 {
			fmt.Fprintln(tw, "  no images")
		}
	}
	tw.Flush()
	for _, line := range strings.SplitAfter(table.String(), "\n") {
		if line != "" {
			fmt.Fprintln(out, strings.TrimRight(line, " \n"))
		}
	}
	switch {
	case missing > 0 && written:
		fmt.Fprintf(out, "added %s to %s\n", plural(missing, "image"), def.File)
	case missing > 0:
		comps := []string{}
		for _, c := range found.Components {
			if len(c.Missing) > 0 {
				comps = append(comps, c.Name)
			}
		}
		sort.Strings(comps)
		fmt.Fprintf(out, "%s missing (components %s); --write adds them to %s\n", plural(missing, "image"), strings.Join(comps, ", "), def.File)
	default:
		fmt.Fprintf(out, "no image missing from %s\n", def.File)
	}
}
