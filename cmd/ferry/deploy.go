package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
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

func newDeployCmd() *cobra.Command {
	var (
		kube      kubeFlags
		output    outputFlag
		keys      []string
		opts      deploy.Options
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "deploy PKG --key cosign.pub",
		Short: "Verify a package and push its images into the in-cluster registry",
		Long: `Verify the package (archive or layout folder) fail closed — a valid signature
over its root by --key, and every blob re-hashed — then push its images into
the registry ` + "`ferry init`" + ` set up, under their original paths by the digests the
package recorded (blobs already there are skipped), and record the package
for ` + "`ferry list`" + ` and the agent. Unsigned packages are refused unless
--insecure-skip-signature-verification. Run it where 127.0.0.1:<NodePort>
reaches the registry (a node). Charts and manifests are not installed yet.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			if len(keys) == 0 && !opts.InsecureSkipSignatureVerification {
				return deploy.ErrUnsigned
			}
			var err error
			if opts.Keys, err = loadVerifyKeys(keys); err != nil {
				return err
			}
			cs, err := kube.client()
			if err != nil {
				return err
			}
			r, err := artifact.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			progress, done := newProgress(cmd)
			opts.Progress, opts.Namespace = progress, namespace
			rec, err := deploy.Deploy(cmd.Context(), cs, r, opts)
			done()
			if err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), rec)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deployed %s %s (%s)\n", rec.Name, rec.Version, rec.Root)
			return nil
		},
	}
	kube.register(cmd)
	output.register(cmd)
	addKeyFlag(cmd, &keys)
	cmd.Flags().BoolVar(&opts.InsecureSkipSignatureVerification, "insecure-skip-signature-verification", false, "deploy without a signature check (blobs are still verified)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", inject.DefaultNamespace, "ferry's namespace")
	return cmd
}
