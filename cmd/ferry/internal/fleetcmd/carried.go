package fleetcmd

import (
	"errors"
	"fmt"
	"os"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/spf13/cobra"
)

func newFleetImportCmd() *cobra.Command {
	var (
		f      centreFlags
		output cli.OutputFlag
		reg    registryFlags
	)
	cmd := &cobra.Command{
		Use:     "import REPORT",
		Short:   "Import a carried member's signed report (its first one registers it, with a token)",
		Example: `  ferry fleet import site-report.json --registry registry.example:5000`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			if err := reg.set(cmd, c, "the centre's registry keeps the member's receipt"); err != nil {
				return err
			}
			data, err := readReportFile(args[0])
			if err != nil {
				return err
			}
			m, err := c.Import(cmd.Context(), data)
			if err != nil {
				return fmt.Errorf("import %s: %w", args[0], err)
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "imported the report of %s (%d packages)\n", m.Name, len(m.Status.Packages))
			return nil
		},
	}
	f.register(cmd)
	output.Register(cmd)
	reg.register(cmd, "the centre's registry (host[:port])")
	return cmd
}

func newFleetBundleCmd() *cobra.Command {
	var (
		f       centreFlags
		output  cli.OutputFlag
		file    cli.FileFlag
		pkgName string
		reg     registryFlags
		spool   string
	)
	cmd := &cobra.Command{
		Use:   "bundle MEMBER -f FILE",
		Short: "Write a carried member's bundle: the delta from its last receipt to what is placed on it",
		Example: `  ferry fleet bundle site-7 -f update.tar.zst --registry registry.example:5000
  # at the site
  ferry deploy update.tar.zst --key cosign.pub`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if file.Path == "" {
				return errors.New("-f is required: the bundle to write")
			}
			if err := file.Validate(""); err != nil {
				return err
			}
			c, _, err := f.centreOf()
			if err != nil {
				return err
			}
			if err := reg.set(cmd, c, "the centre's registry holds the packages"); err != nil {
				return err
			}
			if spool == "" {
				if spool, err = os.MkdirTemp("", "ferry-fleet-"); err != nil {
					return err
				}
				defer os.RemoveAll(spool)
			}
			c.Spool = spool
			res, err := c.Bundle(cmd.Context(), args[0], pkgName, file.Path)
			if err != nil {
				return err
			}
			if res.WholeReceipt {
				fmt.Fprintf(cmd.ErrOrStderr(), "ferry: warning: %s's last report carries no receipt of repository %s (an older ferry's report): "+
					"the bundle leaves out what its whole registry holds, and its deploy refuses it if %s lacks any of that; "+
					"a report from ferry at this version makes it exact\n", args[0], res.Package, res.Package)
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s for %s\n", file.Path, args[0])
			return nil
		},
	}
	f.register(cmd)
	output.Register(cmd)
	file.Register(cmd, "the bundle to write (.tar.zst)")
	reg.register(cmd, "the centre's registry (host[:port])")
	cmd.Flags().StringVar(&pkgName, "package", "", "the package, when several are placed on the member")
	cmd.Flags().StringVar(&spool, "spool", "", "folder for the package pulled (default: a temporary one)")
	return cmd
}

// readReportFile reads a signed report: a regular file of at most
// wire.MaxReportFile bytes, opened without blocking.
func readReportFile(path string) ([]byte, error) {
	return confine.ReadPath(path, wire.MaxReportFile)
}
