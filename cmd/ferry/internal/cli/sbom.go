package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// sbomRow is one SBOM as `package sbom PKG -o json` lists it.
type sbomRow struct {
	Image string `json:"image"`
	artifact.SBOM
}

func newSBOMCmd() *cobra.Command {
	var (
		output    OutputFlag
		remote    RemoteFlags
		keys      []string
		platform  string
		outputDir string
		table     bool
	)
	cmd := &cobra.Command{
		Use:   "sbom PKG|REF [IMAGE]",
		Short: "List a package's SBOMs, or print or write those of an image",
		Example: `  # List the package's SBOMs
  ferry package sbom app.tar.zst

  # Write every platform's SBOM of one image into ./sboms
  ferry package sbom app.tar.zst docker.io/library/nginx:1.27 --output-dir sboms

  # Show the packages an image holds, one table per platform
  ferry package sbom app.tar.zst nginx:1.27 --table`,
		Long: `List the SBOMs a package holds (one per image platform, made at create,
or carried from a Zarf package by import): image, platform, format
(spdx-json, cyclonedx-json, or syft-json for Zarf's), digest and size,
from ferry.json.

Given IMAGE (its reference as the package records it, e.g. nginx:1.27 or
docker.io/library/nginx:1.27), print its SBOM document (with --platform
when it has several), write every one into --output-dir, or show with
--table the components each lists (name, version, type, licenses, package
URL; sorted by type, then name), one table per platform, or with -o json
as JSON. Only SBOMs of
the package's graph are read, never other referrers a registry holds, and
each is checked against its digest; a package on disk is verified whole
first. With --key, the package's signature is verified too.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if platform != "" {
				if _, err := definition.ParsePlatform(platform); err != nil {
					return fmt.Errorf("--platform: %w", err)
				}
			}
			if len(args) == 1 && (platform != "" || outputDir != "" || table) {
				return fmt.Errorf("--platform, --output-dir and --table need an IMAGE")
			}
			if table && outputDir != "" {
				return fmt.Errorf("--table and --output-dir: choose one")
			}
			if len(keys) > 0 {
				if _, err := verifyPackage(cmd, args[0], keys, remote, false); err != nil {
					return err
				}
			}
			src, ref, err := OpenSource(cmd, args[0], remote)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				cfg, _, err := artifact.ReadConfig(cmd.Context(), src, ref)
				if err != nil {
					return err
				}
				return printSBOMs(cmd, cfg, output.JSON())
			}
			docs, err := artifact.ReadSBOMs(cmd.Context(), src, ref, args[1], platform)
			if err != nil {
				return err
			}
			if outputDir != "" {
				return writeSBOMs(cmd, docs, outputDir, output.JSON())
			}
			if table {
				return printComponents(cmd, docs, output.JSON())
			}
			if len(docs) > 1 {
				var ps []string
				for _, d := range docs {
					ps = append(ps, d.Platform)
				}
				return fmt.Errorf("%s has %d SBOMs (%s): choose one with --platform, or write them all with --output-dir", docs[0].Image, len(docs), strings.Join(ps, ", "))
			}
			_, err = cmd.OutOrStdout().Write(docs[0].Data)
			return err
		},
	}
	output.Register(cmd)
	remote.Register(cmd)
	AddKeyFlag(cmd, &keys)
	cmd.Flags().StringVar(&platform, "platform", "", "the image platform (os/arch[/variant]) whose SBOM to print")
	cmd.Flags().StringVar(&outputDir, "output-dir", "", "write the image's SBOMs into this folder, one file per platform")
	cmd.Flags().BoolVar(&table, "table", false, "show the components the image's SBOMs list, one table per platform")
	return cmd
}

// printSBOMs lists the SBOMs cfg records.
func printSBOMs(cmd *cobra.Command, cfg *artifact.Config, asJSON bool) error {
	rows := []sbomRow{}
	for _, c := range cfg.Components {
		for _, i := range c.Images {
			for _, s := range i.SBOMs {
				rows = append(rows, sbomRow{Image: i.Ref, SBOM: s})
			}
		}
	}
	if asJSON {
		return WriteJSON(cmd.OutOrStdout(), rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s holds no SBOM (created with --sbom=false, or by an older ferry)\n", cfg.Name, cfg.Version)
		return nil
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tPLATFORM\tFORMAT\tDIGEST\tSIZE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", Cell(r.Image), Cell(r.Platform), Cell(sbomFormatName(r.ArtifactType)), Cell(r.Digest.String()), HumanBytes(r.Size))
	}
	return tw.Flush()
}

// sbomComponents are the components of one SBOM, as `package sbom PKG
// IMAGE --table -o json` lists them.
type sbomComponents struct {
	Image      string          `json:"image"`
	Platform   string          `json:"platform"`
	Format     string          `json:"format"`
	Digest     string          `json:"digest"`
	Components []bom.Component `json:"components"`
}

// printComponents shows the components of each document, sorted by type
// then name: a table per platform, or JSON.
func printComponents(cmd *cobra.Command, docs []artifact.SBOMDocument, asJSON bool) error {
	var all []sbomComponents
	for _, d := range docs {
		cs, err := bom.Read(bytes.NewReader(d.Data), d.ArtifactType, bom.Limits{})
		if err != nil {
			return fmt.Errorf("SBOM %s of %s (%s): %w", d.Digest, d.Image, d.Platform, err)
		}
		bom.Sort(cs)
		if cs == nil {
			cs = []bom.Component{}
		}
		all = append(all, sbomComponents{Image: d.Image, Platform: d.Platform, Format: sbomFormatName(d.ArtifactType), Digest: d.Digest.String(), Components: cs})
	}
	if asJSON {
		return WriteJSON(cmd.OutOrStdout(), all)
	}
	w := cmd.OutOrStdout()
	for i, s := range all {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s %s (%s, %d components)\n", Cell(s.Image), Cell(s.Platform), Cell(s.Format), len(s.Components))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tTYPE\tLICENSES\tPURL")
		for _, c := range s.Components {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", Cell(c.Name), Cell(c.Version), Cell(c.Type), Cell(strings.Join(c.Licenses, ", ")), Cell(c.PURL))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// Cell is s as a table cell: quoted when it holds a tab, a line break or
// another character that is not printable, so that an SBOM, a registry or
// a database cannot break the table or act on the terminal; "-" when
// empty.
func Cell(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	if s == "" {
		return "-"
	}
	return s
}

// sbomFormatName is the --sbom-format name of an SBOM artifactType.
func sbomFormatName(artifactType string) string {
	for _, f := range definition.SBOMFormats {
		if f.ArtifactType() == artifactType {
			return string(f)
		}
	}
	return artifactType
}

// writeSBOMs writes each document into dir as <image>_<platform>.<ext>,
// the image reference and platform made file-name safe.
func writeSBOMs(cmd *cobra.Command, docs []artifact.SBOMDocument, dir string, asJSON bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	safe := strings.NewReplacer("/", "_", ":", "_", "@", "_")
	type written struct {
		artifact.SBOMDocument
		Path string `json:"path"`
	}
	var out []written
	for _, d := range docs {
		ext := definition.SBOMFormat(sbomFormatName(d.ArtifactType)).FileName()
		name := safe.Replace(d.Image) + "_" + safe.Replace(d.Platform) + strings.TrimPrefix(ext, "sbom")
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, d.Data, 0o644); err != nil {
			return err
		}
		out = append(out, written{d, p})
	}
	if asJSON {
		return WriteJSON(cmd.OutOrStdout(), out)
	}
	for _, w := range out {
		fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s %s, %s)\n", w.Path, w.Image, w.Platform, w.Digest)
	}
	return nil
}
