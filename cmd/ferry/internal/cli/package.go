package cli

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/imagesig"
)

// newPackageCmd groups the package verbs.
func newPackageCmd() *cobra.Command {
	cmd := GroupCmd(&cobra.Command{
		Use:   "package",
		Short: "Create, inspect and move packages",
		Example: `  ferry package create ./app -f app.tar.zst
  ferry package inspect app.tar.zst
  ferry package push app.tar.zst registry.example.com/apps/app`,
	})
	cmd.AddCommand(newInspectCmd(), newPushCmd(), newPullCmd(), newVerifyCmd(), newSBOMCmd(), newSplitCmd(), newDeltaCmd())
	return cmd
}

func newInspectCmd() *cobra.Command {
	var (
		output OutputFlag
		remote RemoteFlags
		keys   []string
	)
	cmd := &cobra.Command{
		Use:   "inspect PKG|REF",
		Short: "Verify a package and show what it holds",
		Example: `  ferry package inspect app.tar.zst

  # A package in a registry, its signature checked too
  ferry package inspect registry.example.com/apps/app:1.0.0 --key cosign.pub -o json`,
		Long: `Read a package (archive or layout folder) in one streaming pass, verify every
blob against its digest and the graph against ferry.json, and show what it holds.
Given a registry reference instead (host/repository:tag or @digest; oci://
makes it explicit, ./ a path), read only the manifests and ferry.json.
With --key, verify the signature and every blob first (as package verify),
and print nothing unless both hold.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			var rep *artifact.Report
			path, _, err := ParseSource(args[0])
			if err != nil {
				return err
			}
			var archiveSize int64 = -1
			if idx := artifact.PartsIndexPath(path); path != "" && idx != "" {
				if ps, err := artifact.ReadParts(idx); err == nil {
					archiveSize = ps.Size
				}
			} else if fi, err := os.Stat(path); path != "" && err == nil && fi.Mode().IsRegular() {
				archiveSize = fi.Size()
			}
			if len(keys) > 0 {
				res, err := verifyPackage(cmd, args[0], keys, remote, false)
				if err != nil {
					return err
				}
				rep = res.Report
			} else {
				src, ref, err := OpenSource(cmd, args[0], remote)
				if err != nil {
					return err
				}
				progress, done := NewProgress(cmd)
				rep, err = artifact.Inspect(cmd.Context(), src, ref, progress)
				done()
				if err != nil {
					return err
				}
			}
			if output.JSON() {
				return WriteJSON(cmd.OutOrStdout(), newReportJSON(rep))
			}
			printReport(cmd, rep, archiveSize)
			return nil
		},
	}
	output.Register(cmd)
	remote.Register(cmd)
	AddKeyFlag(cmd, &keys)
	return cmd
}

// printReport prints rep as text; archiveSize is the archive file's size,
// or negative when there is no archive file.
func printReport(cmd *cobra.Command, rep *artifact.Report, archiveSize int64) {
	// Text from the package (a description, a file's target) could carry
	// a terminal's escape sequences or line ends of its own.
	inert(reflect.ValueOf(rep))
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "Package\t%s %s\n", rep.Name, rep.Version)
	if rep.Description != "" {
		fmt.Fprintf(tw, "Description\t%s\n", rep.Description)
	}
	if rep.Created != "" {
		fmt.Fprintf(tw, "Created\t%s\n", rep.Created)
	}
	fmt.Fprintf(tw, "Root\t%s\n", rep.Root)
	fmt.Fprintf(tw, "Platforms\t%s\n", strings.Join(rep.Platforms, ", "))
	signed := "no"
	if rep.Signed {
		signed = "yes (cosign signature manifest " + rep.Signatures[0].String() + "; check it with package verify --key)"
	}
	fmt.Fprintf(tw, "Signed\t%s\n", signed)
	for _, p := range rep.ImagePolicies {
		fmt.Fprintf(tw, "Image policy\t%s\n", policyLine(p))
	}
	fmt.Fprintf(tw, "Content\t%s in images, charts, manifests, files and git repositories (a shared blob counted at each use)\n", HumanBytes(rep.TotalSize))
	fmt.Fprintf(tw, "Blobs\t%s in %s, each stored once, metadata included, uncompressed\n", HumanBytes(rep.StoredSize), plural(rep.Blobs, "blob"))
	if archiveSize >= 0 {
		fmt.Fprintf(tw, "Archive\t%s on disk\n", HumanBytes(archiveSize))
	}
	if d := rep.Delta; d != nil {
		fmt.Fprintf(tw, "Delta\tleaves out %s (%s) that %s held; push, deploy or registry load it where they are\n", plural(len(d.Omitted), "blob"), HumanBytes(d.OmittedSize()), orUnknown(d.Base))
		for i, o := range d.Omitted {
			if i == deltaShown {
				fmt.Fprintf(tw, "\t  and %d more (-o json lists them)\n", len(d.Omitted)-deltaShown)
				break
			}
			fmt.Fprintf(tw, "\t  %s\t%s\n", o.Digest, HumanBytes(o.Size))
		}
	}
	for _, c := range rep.Components {
		req := "optional"
		if c.Required {
			req = "required"
		}
		tw.Flush()
		line := fmt.Sprintf("Component %s (%s)", c.Name, req)
		if c.Description != "" {
			line += " " + c.Description
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\n%s\n", line)
		for _, i := range c.Images {
			fmt.Fprintf(tw, "  image\t%s\t→ %s\t%s\t%s\n", i.Ref, i.Digest, strings.Join(i.Platforms, ","), HumanBytes(i.Size))
			if len(i.SBOMs) > 0 {
				var size int64
				for _, s := range i.SBOMs {
					size += s.Size
				}
				fmt.Fprintf(tw, "  \t  %s (%s; package sbom lists them)\t\t\t%s\n", plural(len(i.SBOMs), "SBOM"), sbomFormatName(i.SBOMs[0].ArtifactType), HumanBytes(size))
			}
			for _, sg := range i.Signatures {
				how := "referrer " + sg.ArtifactType
				if sg.Tag != "" {
					how = "tag " + sg.Tag
				}
				// No tab: a line's last cell is no column's, so these long
				// rows (two digests and a tag) do not widen the image rows.
				fmt.Fprintf(tw, "      %s of %s: %s, %s, %s\n", sg.Kind, sg.Subject, sg.Digest, how, HumanBytes(sg.Size))
			}
			if i.Policy != "" {
				fmt.Fprintf(tw, "  \t  policy %s (checked at create; package verify --images checks it again)\n", i.Policy)
			}
		}
		for _, h := range c.Charts {
			fmt.Fprintf(tw, "  chart\t%s %s\t%s\t%s\t%s\n", h.Name, h.Version, h.Digest, h.Source, HumanBytes(h.Size))
		}
		for _, m := range c.Manifests {
			fmt.Fprintf(tw, "  manifests\t%s (%s)\t%s\t\t%s\n", m.Name, plural(len(m.Files), "file"), m.Digest, HumanBytes(m.Size))
		}
		for _, f := range c.Files {
			fmt.Fprintf(tw, "  file\t%s\t%s\t%04o\t%s\n", f.Target, f.Digest, f.Mode, HumanBytes(f.Size))
		}
		for _, g := range c.Repositories {
			what := "tree and history"
			if !g.History {
				what = "tree only"
			}
			fmt.Fprintf(tw, "  git\t%s\t%s\t%s (%s)\t%s\n", g.URL, g.Digest, g.Revision, what, HumanBytes(g.Size))
		}
	}
}

// plural is "1 file", "2 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// deltaShown is how many blobs a delta leaves out inspect lists as text.
const deltaShown = 5

func orUnknown(s string) string {
	if s == "" {
		return "the far side"
	}
	return s
}

// policyLine describes an image policy in one line: its name, whether a
// signature is required, whom it trusts and the attestations it wants.
func policyLine(p imagesig.Policy) string {
	req := "required"
	if !p.Required {
		req = "optional"
	}
	var trusts []string
	for _, a := range p.Authorities {
		trusts = append(trusts, a.Trusts()...)
	}
	line := fmt.Sprintf("%s (%s): %s", p.Name, req, strings.Join(trusts, ", "))
	for _, a := range p.Attestations {
		line += "; attestation " + a.PredicateType
	}
	return line
}

// inert shows the control characters (line ends, tabs, escapes) of every
// string v reaches as \x1b, so that printing them acts on no terminal
// and adds no line.
func inert(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			inert(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			inert(v.Field(i))
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			inert(v.Index(i))
		}
	case reflect.String:
		if s := v.String(); v.CanSet() && strings.IndexFunc(s, unicode.IsControl) >= 0 {
			var b strings.Builder
			for _, r := range s {
				writeInert(&b, r)
			}
			v.SetString(b.String())
		}
	}
}
