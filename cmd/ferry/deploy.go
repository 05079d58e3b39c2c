//go:build !ferryfront

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/reach"
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
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	return cmd
}

func newDeployCmd() *cobra.Command {
	var (
		kube      kubeFlags
		output    outputFlag
		keys      []string
		opts      deploy.Options
		namespace string
		remote    remoteFlags
		via       viaFlag
	)
	cmd := &cobra.Command{
		Use:   "deploy PKG|REF --key cosign.pub",
		Short: "Verify a package, push its images into the cluster, install its charts and manifests",
		Long: `Verify the package (archive, layout folder, or registry reference, which is
first pulled into a temporary archive — with --key, nothing is pulled unless
its signature verifies) fail closed — a valid signature over its root by
--key, and every blob re-hashed — then push its images into
the registry ` + "`ferry init`" + ` set up, under their original paths by the digests the
package recorded (blobs already there are skipped); install or upgrade each
selected component's charts with Helm (waiting until ready, rolled back on
failure) and apply its manifests (server-side apply), every workload's
images rewritten to the in-cluster registry by digest; remove what an
earlier deploy of the package installed and this one does not; and record
the package for ` + "`ferry list`" + `, ` + "`ferry remove`" + ` and the agent. Unsigned packages are
refused unless --insecure-skip-signature-verification.

deploy runs on a node or on a workstation that reaches only the API server:
it pushes through 127.0.0.1:<NodePort> when that leads to the registry, else
through a tunnel to a registry Pod, opened for the command (--registry-via).`,
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
			if _, err := via.parse(); err != nil {
				return err
			}
			cs, cfg, err := kube.clientConfig()
			if err != nil {
				return err
			}
			progress, done := newProgress(cmd)
			defer done()
			path, ref, err := parseSource(args[0])
			if err != nil {
				return err
			}
			if path == "" {
				ro, err := remote.options(cmd, ref)
				if err != nil {
					return err
				}
				tmp, err := os.MkdirTemp("", "ferry-deploy-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				path = filepath.Join(tmp, "package.tar")
				repo, err := ro.Repository(ref)
				if err != nil {
					return err
				}
				if _, err := artifact.Pull(cmd.Context(), repo, repo.Reference.Reference, path, artifact.PullOptions{Keys: opts.Keys, Progress: progress}); err != nil {
					return err
				}
			}
			r, err := artifact.Open(cmd.Context(), path)
			if err != nil {
				return err
			}
			ep, err := via.open(cmd, cs, cfg, namespace, "", "")
			if err != nil {
				return err
			}
			defer ep.Close()
			opts.Progress, opts.Namespace, opts.Kube, opts.Registry = progress, namespace, kube.getter(), ep.Host
			rec, err := deploy.Deploy(cmd.Context(), cs, r, opts)
			done()
			if err != nil {
				return tunnelCause(err, ep)
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), struct {
					*deploy.Record
					RegistryVia *reach.Endpoint `json:"registryVia"`
				}{rec, ep})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deployed %s %s (%s)\n", rec.Name, rec.Version, rec.Root)
			fmt.Fprintf(cmd.OutOrStdout(), "registry via %s\n", ep)
			return nil
		},
	}
	kube.register(cmd)
	output.register(cmd)
	addKeyFlag(cmd, &keys)
	cmd.Flags().BoolVar(&opts.InsecureSkipSignatureVerification, "insecure-skip-signature-verification", false, "deploy without a signature check (blobs are still verified)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	remote.register(cmd)
	via.register(cmd, reach.Auto)
	cmd.Flags().StringSliceVar(&opts.Components, "components", nil, "components to deploy, comma-separated (required ones always; default all)")
	cmd.Flags().StringArrayVar(&opts.Set, "set", nil, "chart value KEY=VALUE, as helm --set (repeatable; given to every chart)")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", deploy.DefaultTimeout, "how long each chart or manifest bundle may take to be ready")
	return cmd
}

func newRemoveCmd() *cobra.Command {
	var (
		kube   kubeFlags
		output outputFlag
		opts   deploy.RemoveOptions
		via    viaFlag
	)
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a deployed package: its releases, manifests and unshared images",
		Long: `Uninstall the Helm releases of the deployed package NAME, delete the objects
of its manifests, delete its images from the in-cluster registry unless
another deployed package uses them, forget it, and garbage-collect the
registry's storage (in the registry's pod, which is then restarted). The
registry is reached as deploy reaches it (--registry-via).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			cs, cfg, err := kube.clientConfig()
			if err != nil {
				return err
			}
			// Opened first: when the registry cannot be reached, nothing is
			// removed.
			ep, err := via.open(cmd, cs, cfg, opts.Namespace, "", "")
			if err != nil {
				return err
			}
			defer ep.Close()
			progress, done := newProgress(cmd)
			opts.Progress, opts.Kube, opts.Registry = progress, kube.getter(), ep.Host
			res, err := deploy.Remove(cmd.Context(), cs, args[0], opts)
			done()
			if err != nil {
				return tunnelCause(err, ep)
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), struct {
					*deploy.RemoveResult
					RegistryVia *reach.Endpoint `json:"registryVia"`
				}{res, ep})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s %s: %d releases, %d objects, %d images (%d kept for other packages); registry storage %s → %s\n",
				res.Name, res.Version, len(res.Releases), len(res.Objects), len(res.Images), len(res.Kept), humanBytes(res.Storage.Before), humanBytes(res.Storage.After))
			fmt.Fprintf(cmd.OutOrStdout(), "registry via %s\n", ep)
			return nil
		},
	}
	kube.register(cmd)
	output.register(cmd)
	cmd.Flags().StringVarP(&opts.Namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", deploy.DefaultTimeout, "how long each uninstall may take")
	via.register(cmd, reach.Auto)
	return cmd
}

// tunnelCause adds what the tunnel last reported to an error that a broken
// connection to the registry caused: through a tunnel, the client only sees
// its connection closed.
func tunnelCause(err error, ep *reach.Endpoint) error {
	if terr := ep.Err(); terr != nil && reach.Transient(err) {
		return fmt.Errorf("%w (the tunnel to the registry: %v)", err, terr)
	}
	return err
}
