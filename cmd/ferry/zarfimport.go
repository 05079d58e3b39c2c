package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/scratch"
)

func newImportCmd() *cobra.Command {
	var (
		keyPath, signKey string
		sbomOn, strict   bool
		file             cli.FileFlag
		output           = cli.OutputFlag{WritesFile: true}
	)
	cmd := &cobra.Command{
		Use:   "import ZARF-PACKAGE",
		Short: "Turn a built Zarf package (zarf-package-….tar.zst) into a ferry package, offline",
		Example: `  # A signed Zarf package, checked with Zarf's key, the result signed with ferry's
  ferry package import zarf-package-shop-amd64-1.0.0.tar.zst --key zarf.pub -f shop.tar.zst --sign-key cosign.key

  # A multi-part package: name its .part000
  ferry package import zarf-package-big-amd64-2.0.0.tar.zst.part000 -f big.tar.zst`,
		Long: `Turn a built Zarf v0.60.0 package into a ferry package without the network.

The package (.tar.zst, .tar, or the .part000 of a multi-part one) is checked
first: with --key, its zarf.yaml.sig against that cosign public key (a key
and an unsigned package is an error); then checksums.txt against zarf.yaml's
aggregateChecksum and every file against checksums.txt, as zarf package
deploy checks them. Its zarf.yaml is converted as package convert converts
a definition, with the package's own content as sources: the images of its
OCI layout by reference (so by the same digests Zarf deploys), its chart
archives, manifests (kustomizations as Zarf rendered them), files (with
their modes) and git repositories. Zarf's SBOMs of its images (Syft JSON,
from sboms.tar) are kept as referrers of the manifests they describe, as
create adds its own; with --sbom, ferry makes the SBOM of every image Zarf
made none of (Zarf's document wins where there is one). Zarf's HTML
viewers and the SBOMs of components' files are not carried. What ferry
does not do as Zarf does is reported one gap a line, as package convert
reports it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if err := file.Validate(""); err != nil {
				return err
			}
			if err := file.NotInput(args[0]); err != nil {
				return err
			}
			var key *artifact.PublicKey
			if keyPath != "" {
				k, err := artifact.LoadPublicKey(keyPath)
				if err != nil {
					return err
				}
				key = k
			}
			// Swept by the next run if this one is killed.
			tmp, err := scratch.MkdirTemp("", "ferry-zarf-import-")
			if err != nil {
				return err
			}
			defer tmp.Remove()
			pkg, err := zarf.Extract(args[0], filepath.Join(tmp.Path, "pkg"), key)
			if err != nil {
				return err
			}
			res, err := zarf.Import(pkg)
			if err != nil {
				return err
			}
			defFile := filepath.Join(pkg.Dir, definition.FileName)
			if err := os.WriteFile(defFile, res.Definition, 0o600); err != nil {
				return err
			}
			def, err := definition.Load(defFile)
			if err != nil {
				return err
			}
			def.SBOM.Disabled = !sbomOn
			gen, err := sbomGenerator(def)
			if err != nil {
				return err
			}
			// Zarf's documents are kept; --sbom fills the images it has none for.
			if len(res.SBOMs) > 0 {
				def.SBOM.Disabled = false
				gen = zarf.SBOMs{Images: res.SBOMs, Next: gen}
			}
			epoch, err := build.SourceDateEpoch()
			if err != nil {
				return err
			}
			opts := build.CreateOptions{Charts: chart.Packager{}, Git: gitrepo.Fetcher{}, SBOM: gen, Output: file.Path, Epoch: epoch}
			if signKey != "" {
				if opts.SignKey, err = loadSignKey(cmd, signKey); err != nil {
					return err
				}
			}
			progress, done := cli.NewProgress(cmd)
			opts.Progress = progress
			created, err := build.Create(cmd.Context(), def, opts)
			done()
			if err != nil {
				return err
			}
			signature := "not signed"
			switch {
			case pkg.Verified:
				signature = "signature verified with " + keyPath
			case pkg.Signed:
				signature = "signed, signature not checked (no --key)"
			}
			// Gaps name the files inside the archive (ARCHIVE:zarf.yaml), not the
			// folder they were extracted to and that is gone.
			for i, g := range res.Gaps {
				if rel, err := filepath.Rel(pkg.Dir, g.File); err == nil && filepath.IsLocal(rel) {
					res.Gaps[i].File = args[0] + ":" + filepath.ToSlash(rel)
				}
			}
			if !output.JSON() {
				for _, g := range res.Gaps {
					fmt.Fprintln(cmd.OutOrStdout(), g.String())
				}
			}
			// Zarf's SBOMs carried, and ferry's own made (--sbom).
			zarfSBOMs, ferrySBOMs := 0, 0
			for _, c := range created.Config.Components {
				for _, i := range c.Images {
					for _, s := range i.SBOMs {
						if s.ArtifactType == definition.ArtifactTypeSyft {
							zarfSBOMs++
						} else {
							ferrySBOMs++
						}
					}
				}
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]any{
					"source": args[0], "zarfSignature": signature, "path": created.Path, "root": created.Root.Digest,
					"name": created.Config.Name, "version": created.Config.Version, "signed": signKey != "", "gaps": res.Gaps,
					"zarfSBOMs": zarfSBOMs, "ferrySBOMs": ferrySBOMs,
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: Zarf package %s\nimported %s (%s %s, %s, %d blobs, %s)\n", args[0], signature, created.Path, created.Config.Name, created.Config.Version, cli.HumanBytes(created.Size), created.Blobs, plural(len(res.Gaps), "gap"))
			if zarfSBOMs+ferrySBOMs > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "SBOMs: %d of Zarf's (Syft JSON), %d made by ferry; `ferry package sbom` lists them\n", zarfSBOMs, ferrySBOMs)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "root %s\n", created.Root.Digest)
			if strict && len(res.Gaps) > 0 {
				return fmt.Errorf("--strict: %s (see above)", plural(len(res.Gaps), "gap"))
			}
			return nil
		},
	}
	file.Register(cmd, "package archive to write (default <name>-<version>.tar.zst)")
	cmd.Flags().StringVar(&keyPath, "key", "", "Zarf's cosign public key: the package's zarf.yaml.sig must verify with it")
	cmd.Flags().StringVar(&signKey, "sign-key", "", "cosign private key to sign the ferry package with")
	cmd.Flags().BoolVar(&sbomOn, "sbom", false, "make ferry's SBOM of every image Zarf made none of (Zarf's own are kept either way)")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 1 when there is a gap (the package is still written)")
	output.Register(cmd)
	return cmd
}
