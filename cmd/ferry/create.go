package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/artifact/sbomexec"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

func newCreateCmd() *cobra.Command {
	var (
		format, signKey string
		sbomOn, dryRun  bool
		sbomFormat      string
		partSize        string
		remote          cli.RemoteFlags
		render          renderFlags
		file            cli.FileFlag
		output          = cli.OutputFlag{WritesFile: true}
	)
	cmd := &cobra.Command{
		Use:   "create [DIR|ferry.yaml]",
		Short: "Create a package from a ferry.yaml definition",
		Example: `  # Package the ferry.yaml of the current folder into <name>-<version>.tar.zst
  ferry package create

  # Package ./app into app.tar.zst, signed, without SBOMs (faster)
  ferry package create ./app -f app.tar.zst --sign-key cosign.key --sbom=false

  # Check ./app's definition and local files without fetching anything
  ferry package create ./app --dry-run`,
		Long: `Create a package from a ferry.yaml definition (default: the current folder).

The package is one OCI image layout archived as .tar.zst (default) or .tar,
written atomically: an interrupted create leaves no file behind. With
--part-size it is then split into parts that fit a medium and removed
(see package split). The same
inputs give the same bytes; SOURCE_DATE_EPOCH sets the created time.
Every image platform gets an SBOM (SPDX JSON, made with Syft, offline, by
the ferry-sbom helper beside ferry or on PATH), attached as an OCI referrer
inside the signed graph; --sbom=false skips them.
Registry credentials come from the docker config file (ferry registry login).
Git repositories (components[].repositories) are resolved to a commit once;
HTTP(S) credentials come from ~/.netrc ($NETRC), else from git's credential
helpers (git credential fill, never a prompt); SSH uses the SSH agent and
~/.ssh/known_hosts. None of them is written into the package.
Charts are loaded (and, for findImages: true, rendered) in a child process,
each within --render-memory and --render-timeout: a chart past a limit is
refused, naming it.
--dry-run makes every check that needs no network and writes nothing: the
definition, its files and manifests, image policies, local charts packaged
and rendered, images of OCI layouts (not their layers), local git
repositories. It names every problem, one line each, and exits 1 on any;
images, charts and repositories elsewhere are counted as not checked.`,
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
			switch format {
			case "", "tar", "tar.zst":
			default:
				return fmt.Errorf("--format must be tar or tar.zst, not %q", format)
			}
			if err := file.Validate(artifact.Format(format)); err != nil {
				return err
			}
			src := "."
			if len(args) == 1 {
				src = args[0]
			}
			if dryRun {
				return checkDefinition(cmd, src, charts, charts, output.JSON())
			}
			def, err := definition.Load(src)
			if err != nil {
				return err
			}
			if err := file.NotInput(definitionFiles(def)...); err != nil {
				return err
			}
			// The flags win over ferry.yaml's `sbom:`.
			if cmd.Flags().Changed("sbom") {
				def.SBOM.Disabled = !sbomOn
			}
			if cmd.Flags().Changed("sbom-format") {
				if def.SBOM.Format, err = definition.ParseSBOMFormat(sbomFormat); err != nil || sbomFormat == "" {
					return fmt.Errorf("--sbom-format must be %s or %s, not %q", definition.SBOMFormatSPDX, definition.SBOMFormatCycloneDX, sbomFormat)
				}
			}
			epoch, err := build.SourceDateEpoch()
			if err != nil {
				return err
			}
			ro, err := remote.Options(cmd, "")
			if err != nil {
				return err
			}
			var parts int64
			if partSize != "" {
				if parts, err = cli.ParseSize(partSize); err != nil {
					return fmt.Errorf("--part-size: %w", err)
				}
				if parts < artifact.MinPartSize {
					return fmt.Errorf("--part-size %s: parts are at least 1MiB (%d bytes)", partSize, artifact.MinPartSize)
				}
			}
			gen, err := sbomGenerator(def)
			if err != nil {
				return err
			}
			opts := build.CreateOptions{Charts: charts, Render: charts, SBOM: gen, Git: gitrepo.Fetcher{}, Output: file.Path, Format: artifact.Format(format), Remote: ro, Epoch: epoch}
			if opts.Output == "" && opts.Format != "" {
				opts.Output = def.Metadata.Name + "-" + def.Metadata.Version + opts.Format.Ext()
			}
			if signKey != "" {
				if opts.SignKey, err = loadSignKey(cmd, signKey); err != nil {
					return err
				}
			}
			progress, done := cli.NewProgress(cmd)
			opts.Progress = progress
			res, err := build.Create(cmd.Context(), def, opts)
			done()
			if err != nil {
				return renderAdvice(err)
			}
			var split *artifact.Parts
			if parts > 0 {
				// The archive, signed, is split, then removed: only the
				// parts and their index stay.
				split, err = artifact.Split(cmd.Context(), res.Path, artifact.SplitOptions{PartSize: parts, Progress: progress})
				done()
				if err != nil {
					return err
				}
				if err := os.Remove(res.Path); err != nil {
					return err
				}
				res.Path += artifact.PartsIndexSuffix
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]any{
					"path": res.Path, "root": res.Root.Digest, "name": res.Config.Name, "version": res.Config.Version,
					"size": res.Size, "blobs": res.Blobs, "signed": signKey != "", "repositories": repositoriesOf(res.Config),
					"foundImages": foundOf(res), "parts": partsOf(split),
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created %s (%s %s, %s, %d blobs)\nroot %s\n", res.Path, res.Config.Name, res.Config.Version, cli.HumanBytes(res.Size), res.Blobs, res.Root.Digest)
			if split != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "in %d parts of %s: %s.part001 … %s\n", len(split.Parts), cli.HumanBytes(split.PartSize), split.Package, split.Parts[len(split.Parts)-1].Name)
			}
			for _, g := range repositoriesOf(res.Config) {
				fmt.Fprintf(cmd.OutOrStdout(), "git %s at %s\n", g.URL, g.Revision)
			}
			for _, c := range res.Found {
				for _, ref := range c.Missing {
					fmt.Fprintf(cmd.OutOrStdout(), "found image %s (component %s, findImages)\n", ref, c.Name)
				}
				for _, m := range c.Maybe {
					fmt.Fprintf(cmd.OutOrStdout(), "maybe image %s (component %s, findImages): not carried unless listed in images\n", m.Ref, c.Name)
				}
			}
			return nil
		},
	}
	file.Register(cmd, "archive to write (default <name>-<version>.tar.zst)")
	cmd.Flags().StringVar(&format, "format", "", "archive format: tar.zst or tar (default from the file name; a contradicting extension is an error)")
	remote.RegisterTLS(cmd)
	cmd.Flags().StringVar(&signKey, "sign-key", "", "cosign private key to sign the package with")
	cmd.Flags().BoolVar(&sbomOn, "sbom", true, "make an SBOM of every image platform (Syft; --sbom=false is faster; default: ferry.yaml's sbom.enabled, else true)")
	cmd.Flags().StringVar(&sbomFormat, "sbom-format", "", "SBOM format: spdx-json or cyclonedx-json (default: ferry.yaml's sbom.format, else spdx-json)")
	cmd.Flags().StringVar(&partSize, "part-size", "", "write the package as parts of this size (see package split): 4.7G, 700M (decimal) or 4GiB (binary)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the definition, its files, local charts and images without fetching or writing anything: one line per problem")
	output.Register(cmd)
	render.register(cmd)
	return cmd
}

// partsOf lists a split's parts for -o json, or nil.
func partsOf(ps *artifact.Parts) []artifact.Part {
	if ps == nil {
		return nil
	}
	return ps.Parts
}

// foundOf lists, by component, the images create added for components
// with `findImages: true`.
func foundOf(res *build.CreateResult) map[string][]string {
	out := map[string][]string{}
	for _, c := range res.Found {
		out[c.Name] = c.Missing
	}
	return out
}

// repositoriesOf lists the git repositories of every component of cfg.
func repositoriesOf(cfg *artifact.Config) []artifact.Repository {
	out := []artifact.Repository{}
	for _, c := range cfg.Components {
		out = append(out, c.Repositories...)
	}
	return out
}

// sbomGenerator returns the generator of def's SBOMs: none when def has
// them off or has no image, else one running the ferry-sbom helper, which
// must then be found.
func sbomGenerator(def *definition.Definition) (build.SBOMGenerator, error) {
	if def.SBOM.Disabled || !slices.ContainsFunc(def.Components, func(c definition.Component) bool { return len(c.Images) > 0 || c.FindImages }) {
		return nil, nil
	}
	helper, err := sbomexec.FindHelper()
	if errors.Is(err, sbomexec.ErrHelperNotFound) {
		return nil, fmt.Errorf("SBOMs need %s (make build puts it next to ferry), or pass --sbom=false", sbomexec.HelperName)
	}
	if err != nil {
		return nil, err
	}
	return sbomexec.Generator{Path: helper, ToolVersion: cli.CurrentVersion().Version}, nil
}

// definitionFiles are the files a definition names directly (itself, its
// manifest files, carried files, chart archives, policy keys), which
// create must not write its package over.
func definitionFiles(def *definition.Definition) []string {
	files := []string{def.File}
	in := func(p string) { files = append(files, filepath.Join(def.Dir, p)) }
	for _, c := range def.Components {
		for _, m := range c.Manifests {
			for _, f := range m.Files {
				in(f)
			}
		}
		for _, f := range c.Files {
			in(f.Source)
		}
		for _, ch := range c.Charts {
			if ch.Path != "" {
				in(ch.Path)
			}
		}
	}
	for _, p := range def.ImagePolicies {
		for _, a := range p.Authorities {
			if a.Key != "" {
				in(a.Key)
			}
			if a.TrustedRoot != "" {
				in(a.TrustedRoot)
			}
		}
	}
	return files
}
