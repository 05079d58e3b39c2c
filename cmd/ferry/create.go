//go:build !ferryfront

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
)

func newCreateCmd() *cobra.Command {
	var (
		format, signKey string
		remote          remoteFlags
		file            fileFlag
		output          = outputFlag{writesFile: true}
	)
	cmd := &cobra.Command{
		Use:   "create [DIR|ferry.yaml]",
		Short: "Create a package from a ferry.yaml definition",
		Long: `Create a package from a ferry.yaml definition (default: the current folder).

The package is one OCI image layout archived as .tar.zst (default) or .tar,
written atomically: an interrupted create leaves no file behind. The same
inputs give the same bytes; SOURCE_DATE_EPOCH sets the created time.
Registry credentials come from the docker config file (ferry registry login).
Git repositories (components[].repositories) are resolved to a commit once;
HTTP(S) credentials come from ~/.netrc ($NETRC), else from git's credential
helpers (git credential fill, never a prompt); SSH uses the SSH agent and
~/.ssh/known_hosts. None of them is written into the package.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			switch format {
			case "", "tar", "tar.zst":
			default:
				return fmt.Errorf("--format must be tar or tar.zst, not %q", format)
			}
			if err := file.validate(artifact.Format(format)); err != nil {
				return err
			}
			src := "."
			if len(args) == 1 {
				src = args[0]
			}
			def, err := artifact.LoadDefinition(src)
			if err != nil {
				return err
			}
			epoch, err := artifact.SourceDateEpoch()
			if err != nil {
				return err
			}
			ro, err := remote.options(cmd, "")
			if err != nil {
				return err
			}
			opts := artifact.CreateOptions{Charts: chart.Packager{}, Git: gitrepo.Fetcher{}, Output: file.path, Format: artifact.Format(format), Remote: ro, Epoch: epoch}
			if opts.Output == "" && opts.Format != "" {
				opts.Output = def.Metadata.Name + "-" + def.Metadata.Version + opts.Format.Ext()
			}
			if signKey != "" {
				if opts.SignKey, err = loadSignKey(cmd, signKey); err != nil {
					return err
				}
			}
			progress, done := newProgress(cmd)
			opts.Progress = progress
			res, err := artifact.Create(cmd.Context(), def, opts)
			done()
			if err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{
					"path": res.Path, "root": res.Root.Digest, "name": res.Config.Name, "version": res.Config.Version,
					"size": res.Size, "blobs": res.Blobs, "signed": signKey != "", "repositories": repositoriesOf(res.Config),
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created %s (%s %s, %s, %d blobs)\nroot %s\n", res.Path, res.Config.Name, res.Config.Version, humanBytes(res.Size), res.Blobs, res.Root.Digest)
			for _, g := range repositoriesOf(res.Config) {
				fmt.Fprintf(cmd.OutOrStdout(), "git %s at %s\n", g.URL, g.Revision)
			}
			return nil
		},
	}
	file.register(cmd, "archive to write (default <name>-<version>.tar.zst)")
	cmd.Flags().StringVar(&format, "format", "", "archive format: tar.zst or tar (default from the file name; a contradicting extension is an error)")
	remote.registerTLS(cmd)
	cmd.Flags().StringVar(&signKey, "sign-key", "", "cosign private key to sign the package with")
	output.register(cmd)
	return cmd
}

// repositoriesOf lists the git repositories of every component of cfg.
func repositoriesOf(cfg *artifact.Config) []artifact.Repository {
	out := []artifact.Repository{}
	for _, c := range cfg.Components {
		out = append(out, c.Repositories...)
	}
	return out
}
