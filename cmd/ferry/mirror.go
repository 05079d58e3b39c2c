package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

func newMirrorCmd() *cobra.Command {
	var (
		remote    cli.RemoteFlags
		output    cli.OutputFlag
		keys      []string
		inCluster bool
		kube      kubeFlags
		via       viaFlag
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "mirror PKG REGISTRY | mirror PKG --in-cluster",
		Short: "Push a package's images to an external registry instead of the in-cluster one",
		Example: `  # Push the package and its images under registry.example.com/mirror, if cosign.pub signed it
  ferry package mirror app.tar.zst registry.example.com/mirror --key cosign.pub

  # Push them into the registry ferry init set up, without deploying
  ferry package mirror app.tar.zst --in-cluster --key cosign.pub`,
		Long: `Push the package (archive or layout folder) to REGISTRY (host[:port][/prefix])
as the in-cluster registry gets it on deploy: the package under its own name
(<name>:<version>), and each image under its original repository path and tag
without the registry host (docker.io/library/nginx:1.27 →
REGISTRY/library/nginx:1.27), by the digest the package recorded, blobs
mounted from the package's repository. With --key, a valid signature over the
root by that key is required first: nothing is pushed otherwise.
Credentials come from --username/--password-stdin or the docker config file
(ferry registry login).

With --in-cluster instead of REGISTRY, the package goes to the registry
` + "`ferry init`" + ` set up, with its account, reached through 127.0.0.1:<NodePort> on a
node or else through a tunnel (--registry-via), as deploy pushes it, without
installing anything.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if inCluster {
				return cobra.ExactArgs(1)(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			var (
				target string
				ro     artifact.RemoteOptions
				err    error
				ep     *reach.Endpoint
			)
			if inCluster {
				cs, cfg, err := kube.clientConfig()
				if err != nil {
					return err
				}
				if ep, err = via.open(cmd, cs, cfg, namespace, "", ""); err != nil {
					return err
				}
				defer ep.Close()
				_, account, err := cluster.ReadRegistry(cmd.Context(), cs.CoreV1().Secrets(namespace))
				if err != nil {
					return err
				}
				target = ep.Host
				ro = artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(ep.Host, auth.Credential{Username: account.Username, Password: account.Password})}
				args = append(args, ep.NodeHost) // what the nodes see, in the text output
			} else {
				target = strings.TrimSuffix(strings.TrimPrefix(args[1], cli.OCIScheme), "/")
				if ro, err = remote.Options(cmd, target); err != nil {
					return err
				}
			}
			verifyKeys, err := cli.LoadVerifyKeys(keys)
			if err != nil {
				return err
			}
			r, err := artifact.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			progress, done := cli.NewProgress(cmd)
			defer done()
			if len(verifyKeys) > 0 {
				if _, err := artifact.Verify(cmd.Context(), r, "", artifact.VerifyOptions{Keys: verifyKeys, Progress: progress}); err != nil {
					return err
				}
			}
			var res *artifact.MirrorResult
			err = reach.Retry(cmd.Context(), 0, func() error {
				var err error
				res, err = artifact.Mirror(cmd.Context(), r, target, artifact.MirrorOptions{Remote: ro, Progress: progress})
				return err
			})
			done()
			if err != nil {
				return err
			}
			if output.JSON() {
				if ep != nil {
					return cli.WriteJSON(cmd.OutOrStdout(), struct {
						*artifact.MirrorResult
						RegistryVia *reach.Endpoint `json:"registryVia"`
					}{res, ep})
				}
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mirrored package %s (%s) to %s\n", res.Package, res.Root, args[1])
			for _, i := range res.Images {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s → %s/%s:%s@%s\n", i.Ref, args[1], i.Repository, i.Tag, i.Digest)
			}
			return nil
		},
	}
	cli.AddKeyFlag(cmd, &keys)
	remote.Register(cmd)
	output.Register(cmd)
	cmd.Flags().BoolVar(&inCluster, "in-cluster", false, "push to the in-cluster registry that ferry init set up (instead of REGISTRY)")
	kube.register(cmd)
	via.register(cmd, reach.Auto)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace (with --in-cluster)")
	return cmd
}
