package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/inject"
)

func newListCmd() *cobra.Command {
	var (
		kube      kubeFlags
		output    outputFlag
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the packages deployed in the cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			cs, err := kube.client()
			if err != nil {
				return err
			}
			recs, err := (&deploy.State{Client: cs, Namespace: namespace}).List(cmd.Context())
			if err != nil {
				return err
			}
			if output.json() {
				if recs == nil {
					recs = []*deploy.Record{}
				}
				return writeJSON(cmd.OutOrStdout(), recs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tROOT\tCOMPONENTS")
			for _, r := range recs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Version, r.Root, strings.Join(r.Components, ","))
			}
			return tw.Flush()
		},
	}
	kube.register(cmd)
	output.register(cmd)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", inject.DefaultNamespace, "ferry's namespace")
	return cmd
}
