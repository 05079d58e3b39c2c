package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry/mirror"
)

// remoteFlags are the flags every registry-talking command shares.
type remoteFlags struct{ plainHTTP bool }

func (f *remoteFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.plainHTTP, "plain-http", false, "use plain HTTP for the registry (loopback registries always may)")
}

func (f *remoteFlags) options() artifact.RemoteOptions {
	return artifact.RemoteOptions{PlainHTTP: f.plainHTTP}
}

// isLocal reports whether arg names a package on disk rather than a
// registry reference: it exists, or it does not start with a registry host
// (a name with a dot or port, or localhost, before the first slash).
func isLocal(arg string) bool {
	if _, err := os.Stat(arg); err == nil {
		return true
	}
	host, _, ok := strings.Cut(arg, "/")
	if !ok || host == "." || host == ".." {
		return true
	}
	return !(strings.ContainsAny(host, ".:") || host == "localhost")
}

func newPushCmd() *cobra.Command {
	var (
		remote remoteFlags
		output outputFlag
		mount  string
	)
	cmd := &cobra.Command{
		Use:   "push PKG REF",
		Short: "Push a package (archive or layout folder) to an OCI registry",
		Long: `Push the whole package graph — root index, package manifest, charts, images,
signatures — to REF (host/repo:tag), children before parents, streaming the
archive in one pass. Blobs the registry already has are skipped.
Credentials come from the docker config file.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			r, err := artifact.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			progress, done := newProgress(cmd)
			res, err := artifact.Push(cmd.Context(), r, args[1], artifact.PushOptions{Remote: remote.options(), MountFrom: mount, Progress: progress})
			done()
			if err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{
					"ref": res.Ref, "root": res.Root.Digest, "pushed": res.Pushed, "skipped": res.Skipped, "bytesPushed": res.BytesPushed,
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s: %d blobs uploaded (%s), %d already there\n%s\n", res.Ref, res.Pushed, humanBytes(res.BytesPushed), res.Skipped, res.Root.Digest)
			return nil
		},
	}
	remote.register(cmd)
	output.register(cmd)
	cmd.Flags().StringVar(&mount, "mount-from", "", "repository on the same registry to mount missing blobs from")
	return cmd
}

func newPullCmd() *cobra.Command {
	var (
		remote remoteFlags
		output outputFlag
		out    string
		keys   []string
	)
	cmd := &cobra.Command{
		Use:   "pull REF -o FILE",
		Short: "Pull a package from an OCI registry into an archive",
		Long: `Pull the package REF (tag or digest) into FILE (.tar.zst or .tar), verifying
every blob against its digest; written atomically. What push sent comes back
byte for byte. With --key, a valid signature over the root by that key is
required first: nothing is written otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			if out == "" {
				return fmt.Errorf("-o FILE is required")
			}
			verifyKeys, err := loadVerifyKeys(keys)
			if err != nil {
				return err
			}
			progress, done := newProgress(cmd)
			res, err := artifact.Pull(cmd.Context(), args[0], out, artifact.PullOptions{Remote: remote.options(), Progress: progress, Keys: verifyKeys})
			done()
			if err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{
					"path": res.Path, "root": res.Root.Digest, "name": res.Config.Name, "version": res.Config.Version, "size": res.Size, "blobs": res.Blobs, "signatures": res.Signatures,
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pulled %s → %s (%s %s, %s, %d blobs)\n%s\n", args[0], res.Path, res.Config.Name, res.Config.Version, humanBytes(res.Size), res.Blobs, res.Root.Digest)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "archive to write (.tar.zst or .tar)")
	addKeyFlag(cmd, &keys)
	remote.register(cmd)
	output.register(cmd)
	return cmd
}

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
Credentials come from the docker config file.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
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
				if _, err := artifact.Verify(cmd.Context(), r, artifact.VerifyOptions{Keys: verifyKeys, Progress: progress}); err != nil {
					return err
				}
			}
			res, err := mirror.Load(cmd.Context(), strings.TrimSuffix(args[1], "/"), r, remote.options())
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
