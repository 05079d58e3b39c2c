package main

import (
	"bytes"
	"fmt"
	"slices"
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
		write, writeMaybe, check bool
		set                      []string
		kubeVersion              string
		remote                   cli.RemoteFlags
		output                   cli.OutputFlag
		render                   renderFlags
	)
	cmd := &cobra.Command{
		Use:   "find-images [DIR|ferry.yaml]",
		Short: "List the images a definition's charts and manifests use, and those it lacks",
		Example: `  # Which images do the charts of ./app run that its ferry.yaml does not list?
  ferry package find-images ./app

  # Add them to ferry.yaml (comments and order kept)
  ferry package find-images ./app --write

  # Add the maybe images too (image-like strings in arguments, environment,
  # ConfigMaps and annotations)
  ferry package find-images ./app --write-maybe

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

Maybe images are listed apart: strings outside image fields that a
reference parser reads as an image with a path and a tag or digest (or,
after a key image:, any reference), in containers' args, command and env
values, ConfigMap data and annotations, and image names joined to the hub
and tag of a JSON ConfigMap value (Istio's proxy). Software pulls some of
them (cert-manager's ACME solver); others only look like images. They are
never added unless --write-maybe is given; to carry only some, list those
in ferry.yaml and they show as present.

Placeholders are image references charts write where no image is pulled
(Istio's "auto", which its injector replaces with its proxy): they are
shown apart, "placeholder, not carried", and never added.

--write adds the missing images to the components' images in ferry.yaml,
keeping its comments and order; --write-maybe adds the maybe images too.
--check exits 1 when an image is missing (maybe images do not count).

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
			write = write || writeMaybe
			add, n, maybe := toAdd(found, writeMaybe)
			written := write && len(add) > 0
			if written {
				if err := definition.AddImagesToFile(def.File, add); err != nil {
					return err
				}
			}
			if output.JSON() {
				err = cli.WriteJSON(cmd.OutOrStdout(), map[string]any{
					"definition": def.File, "components": found.Components, "missing": n, "maybe": maybe, "written": written,
				})
			} else {
				printFound(cmd, def, found, foundCounts{missing: n, maybe: maybe, write: write, writeMaybe: writeMaybe})
			}
			if err == nil && check && n > 0 && !write {
				err = fmt.Errorf("%s lacks %s that its charts and manifests use (find-images --write adds them)", def.File, plural(n, "image"))
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&write, "write", false, "add the missing images to ferry.yaml")
	cmd.Flags().BoolVar(&writeMaybe, "write-maybe", false, "add the missing images and the maybe images to ferry.yaml")
	cmd.Flags().BoolVar(&check, "check", false, "exit 1 when an image is missing (unless --write added it)")
	cmd.Flags().StringArrayVar(&set, "set", nil, "chart value KEY=VALUE, as helm --set and deploy --set (repeatable; given to every chart)")
	cmd.Flags().StringVar(&kubeVersion, "kube-version", build.DefaultKubeVersion, "the Kubernetes version charts are rendered for (.Capabilities.KubeVersion)")
	remote.RegisterTLS(cmd)
	output.Register(cmd)
	render.register(cmd)
	return cmd
}

// toAdd lists, by component, the images --write adds: the missing ones,
// and the maybe ones too if maybe; and counts the missing and the maybe
// images.
func toAdd(found *build.FoundImages, maybe bool) (add map[string][]string, missing, maybes int) {
	add = map[string][]string{}
	for _, c := range found.Components {
		refs := slices.Clone(c.Missing)
		for _, m := range c.Maybe {
			if maybe {
				refs = append(refs, m.Ref)
			}
		}
		if len(refs) > 0 {
			add[c.Name] = refs
		}
		missing += len(c.Missing)
		maybes += len(c.Maybe)
	}
	return add, missing, maybes
}

// foundCounts is what printFound says at the end: how many images are
// missing and maybe, and whether they were written.
type foundCounts struct {
	missing, maybe    int
	write, writeMaybe bool
}

// printFound prints what find-images found, component by component.
func printFound(cmd *cobra.Command, def *definition.Definition, found *build.FoundImages, n foundCounts) {
	out := cmd.OutOrStdout()
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	for _, c := range found.Components {
		where := map[string]string{}
		for _, i := range slices.Concat(c.Images, c.Maybe) {
			where[i.Ref] = whereOf(i.Where)
		}
		fmt.Fprintf(tw, "component %s\n", c.Name)
		maybe := make([]string, len(c.Maybe))
		for i, m := range c.Maybe {
			maybe[i] = m.Ref
		}
		rows := []struct {
			what string
			refs []string
		}{{"missing", c.Missing}, {"unused", c.Unused}, {"present", c.Present}, {"test only", c.Test}, {"maybe", maybe}}
		for _, r := range rows {
			for _, ref := range r.refs {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.what, ref, where[ref])
			}
		}
		if c.MaybeLimited {
			fmt.Fprintf(tw, "  maybe\t…\tthe search for maybe images stopped: too many image-like strings\n")
		}
		for _, p := range c.Placeholders {
			fmt.Fprintf(tw, "  placeholder\t%s\t%s; not carried: %s\n", p.Ref, whereOf(p.Where), p.Why)
		}
		if len(c.Images)+len(c.Unused)+len(c.Present)+len(c.Maybe)+len(c.Placeholders) == 0 {
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
	case n.missing > 0 && n.write:
		fmt.Fprintf(out, "added %s to %s\n", plural(n.missing, "image"), def.File)
	case n.missing > 0:
		comps := []string{}
		for _, c := range found.Components {
			if len(c.Missing) > 0 {
				comps = append(comps, c.Name)
			}
		}
		sort.Strings(comps)
		fmt.Fprintf(out, "%s missing (components %s); --write adds them to %s\n", plural(n.missing, "image"), strings.Join(comps, ", "), def.File)
	default:
		fmt.Fprintf(out, "no image missing from %s\n", def.File)
	}
	switch {
	case n.maybe > 0 && n.writeMaybe:
		fmt.Fprintf(out, "added %s to %s\n", plural(n.maybe, "maybe image"), def.File)
	case n.maybe > 0:
		fmt.Fprintf(out, "%s not added; --write-maybe adds them, or list those to carry in %s\n", plural(n.maybe, "maybe image"), def.File)
	}
}

// whereOf is the first place of where, and how many more there are.
func whereOf(where []string) string {
	if len(where) == 0 {
		return ""
	}
	w := where[0]
	if len(where) > 1 {
		w += fmt.Sprintf(" and %d more", len(where)-1)
	}
	return w
}
