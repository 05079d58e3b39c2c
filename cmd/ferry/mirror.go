//go:build !ferryfront

package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
)

func newMirrorCmd() *cobra.Command {
	var (
		remote remoteFlags
		output outputFlag
		keys   []string
	)
	cmd := &cobra.Command{
		Use:   "mirror PKG REGISTRY",
		Short: "Push a package's images to an external registry instead of the in-cluster one",
		Long: `Push the package (archive or layout folder) to REGISTRY (host[:port][/prefix])
as the in-cluster registry gets it on deploy: the package under its own name
(<name>:<version>), and each image under its original repository path and tag
without the registry host (docker.io/library/nginx:1.27 →
REGISTRY/library/nginx:1.27), by the digest the package recorded, blobs
mounted from the package's repository. With --key, a valid signature over the
root by that key is required first: nothing is pushed otherwise.
Credentials come from --username/--password-stdin or the docker config file
(ferry registry login).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			target := strings.TrimSuffix(strings.TrimPrefix(args[1], ociScheme), "/")
			ro, err := remote.options(cmd, target)
			if err != nil {
				return err
			}
			verifyKeys, err := loadVerifyKeys(keys)
			if err != nil {
				return err
			}
			r, err := artifact.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			progress, done := newProgress(cmd)
			defer done()
			if len(verifyKeys) > 0 {
				if _, err := artifact.Verify(cmd.Context(), r, "", artifact.VerifyOptions{Keys: verifyKeys, Progress: progress}); err != nil {
					return err
				}
			}
			res, err := artifact.Mirror(cmd.Context(), r, target, ro)
			done()
			if err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mirrored package %s (%s) to %s\n", res.Package, res.Root, args[1])
			for _, i := range res.Images {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s → %s/%s:%s@%s\n", i.Ref, args[1], i.Repository, i.Tag, i.Digest)
			}
			return nil
		},
	}
	addKeyFlag(cmd, &keys)
	remote.register(cmd)
	output.register(cmd)
	return cmd
}
