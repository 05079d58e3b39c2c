package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
)

func newSplitCmd() *cobra.Command {
	var (
		size   string
		file   FileFlag
		output OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "split PKG --size SIZE",
		Short: "Split a package archive into parts that fit a medium",
		Example: `  # Parts that fit single-layer DVDs (4.7 GB = 4,700,000,000 bytes)
  ferry package split app-1.0.0.tar.zst --size 4.7G

  # Parts of 64 MiB on a USB disk, named /media/usb/app.part001, …
  ferry package split app-1.0.0.tar.zst --size 64MiB -f /media/usb/app`,
		Long: `Split a package archive into parts of exactly --size bytes (the last smaller),
PKG.part001, PKG.part002, …, and an index PKG.parts.json listing each part's
name, size and sha256 and the package's root digest.

Every command that reads a package takes the parts in place, never joined on
disk: name the index, any part, or PKG itself once PKG is gone. What is read
from the parts is verified as an archive is (every blob against its digest,
the root against the index and the signatures); a missing, short or damaged
part is named in one line: the medium to fetch again.

K, M, G, T are decimal (4.7G = 4,700,000,000 bytes, as a DVD's label counts);
Ki, Mi, Gi, Ti binary (4GiB = 4,294,967,296 bytes: one byte more than FAT32
holds; use 4G there). Parts are at least 1 MiB.

Parts are written under temporary names and renamed at the end; parts of an
earlier split into more parts are removed, so no stale part stays behind.
PKG may be a split package itself (split again with another size): each of
its parts is checked against its index as it is copied, and a damaged one
is refused, naming it, with nothing written. PKG is
left in place: remove it once the parts are where they go.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if size == "" {
				return fmt.Errorf("--size is required, e.g. --size 4.7G")
			}
			n, err := ParseSize(size)
			if err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			if n < artifact.MinPartSize {
				return fmt.Errorf("--size %s: parts are at least 1MiB (%d bytes)", size, artifact.MinPartSize)
			}
			progress, done := NewProgress(cmd)
			ps, err := artifact.Split(cmd.Context(), args[0], artifact.SplitOptions{PartSize: n, Base: file.Path, Progress: progress})
			done()
			if err != nil {
				return err
			}
			base := file.Path
			if base == "" {
				base = filepath.Join(filepath.Dir(args[0]), ps.Package)
			}
			return printParts(cmd, args[0], ps, filepath.Dir(base), output)
		},
	}
	cmd.Flags().StringVar(&size, "size", "", "size of every part but the last: 4.7G, 700M (decimal) or 4GiB, 64MiB (binary)")
	file.Register(cmd, "base name of the parts (default PKG): BASE.part001, …, BASE.parts.json")
	output.Register(cmd)
	return cmd
}

// printParts prints the parts of src and their index, written in dir.
func printParts(cmd *cobra.Command, src string, ps *artifact.Parts, dir string, output OutputFlag) error {
	index := filepath.Join(dir, ps.Package+artifact.PartsIndexSuffix)
	if output.JSON() {
		return WriteJSON(cmd.OutOrStdout(), map[string]any{"index": index, "root": ps.Root, "size": ps.Size, "partSize": ps.PartSize, "parts": ps.Parts})
	}
	out := cmd.OutOrStdout()
	for _, p := range ps.Parts {
		fmt.Fprintf(out, "%s\t%d bytes\t%s\n", filepath.Join(dir, p.Name), p.Size, p.Digest)
	}
	fmt.Fprintf(out, "split %s (%s) into %d parts of %s; index %s\n", src, HumanBytes(ps.Size), len(ps.Parts), HumanBytes(ps.PartSize), index)
	return nil
}
