package sbomcmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

// auditDB is the advisory database an audit reads, and what it says of it.
type auditDB struct {
	Source  string    `json:"source"`
	Date    time.Time `json:"date"`
	Records int       `json:"records"`
	// Stale is set when Date is older than --max-age.
	Stale bool `json:"stale"`
	db    *advisory.DB
}

// auditReport is `ferry sbom audit -o json`.
type auditReport struct {
	Database auditDB           `json:"database"`
	Findings []bomscan.Finding `json:"findings"`
}

func newSBOMAuditCmd() *cobra.Command {
	var (
		f      scanFlags
		format string
		dbArg  string
		keys   []string
		maxAge time.Duration
	)
	cmd := &cobra.Command{
		Use:   "audit [PKG|REF] --db DB",
		Short: "Match SBOMs against an advisory database carried across the air gap",
		Example: `  # A package against the Go vulnerability database, carried as a signed package
  ferry sbom audit app-1.0.0.tar.zst --db vulndb-2026.11.05.tar.zst --key vulndb.pub

  # What the cluster runs, against the database deployed in it
  ferry sbom audit --cluster

  # The fleet, as SARIF for a code-scanning tool
  ferry sbom audit --fleet --registry centre.example:5000 --db osv.zip -o sarif > fleet.sarif`,
		Long: `Match the SBOMs of a package, a registry's packages (--registry), a cluster
(--cluster) or the fleet's centre (--fleet) — found as ` + "`ferry sbom query`" + ` finds
them — against an advisory database in OSV's format: a package carrying
one (its advisories component; --key verifies its signature, as
` + "`package verify`" + ` does), a zip of OSV JSON records, or a folder of them.
With --cluster and no --db, the database deployed in the cluster (the
newest Package carrying advisories). Versions compare in each ecosystem's
own order (Go, Debian, Alpine, npm, PyPI, Maven, …).

The text output says the database's date and record count first (and warns
when it is older than --max-age), then each finding: advisory, component,
installed → fixed version, package, image, platform and where it runs.
-o json gives the database and the findings; -o sarif a SARIF 2.1.0 log.

Exit status: 0 when nothing is found, 3 when something is, 1 on error.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case "text", "json", "sarif":
			default:
				return fmt.Errorf("-o/--output must be text, json or sarif, not %q", format)
			}
			if dbArg == "" && !f.inCluster {
				return errors.New("--db is required: the advisory database (a package, a zip or a folder of OSV records); only --cluster has one deployed")
			}
			if len(keys) > 0 && dbArg == "" {
				return errors.New("--key verifies the database package --db names; add --db")
			}
			if maxAge < 0 {
				return fmt.Errorf("--max-age %s is negative", maxAge)
			}
			run, err := f.scanner(cmd, args)
			if err != nil {
				return err
			}
			defer run.done()
			var db *auditDB
			if dbArg != "" {
				db, err = openDB(cmd, dbArg, keys, f.remote)
			} else {
				db, err = deployedDB(cmd, run)
			}
			if err != nil {
				return run.cause(err)
			}
			db.Stale = maxAge > 0 && time.Since(db.Date) > maxAge
			stop := withProgress(cmd, run.s)
			fs, err := run.s.Audit(cmd.Context(), db.db)
			stop()
			if err != nil {
				return run.cause(err)
			}
			out := cmd.OutOrStdout()
			switch format {
			case "json":
				err = cli.WriteJSON(out, auditReport{Database: *db, Findings: fs})
			case "sarif":
				err = bomscan.WriteSARIF(out, fs, db.Date)
			default:
				err = printFindings(out, db, maxAge, fs)
			}
			if err != nil {
				return err
			}
			if len(fs) > 0 {
				return cli.ExitStatus(ExitFindings)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&format, "output", "o", "text", "output format: text, json or sarif")
	cmd.Flags().StringVar(&dbArg, "db", "", "the advisory database: a package or reference carrying one, a zip of OSV JSON records, or a folder of them")
	cmd.Flags().StringArrayVar(&keys, "key", nil, "a cosign public key that must have signed the database package (repeatable)")
	cmd.Flags().DurationVar(&maxAge, "max-age", 720*time.Hour, "warn (text) or flag stale (json) when the database's newest record is older than this; 0: never")
	return cmd
}

// openDB reads the advisory database arg names: a zip or a folder of OSV
// records, or a package carrying one (its signature checked with keys).
func openDB(cmd *cobra.Command, arg string, keys []string, remote cli.RemoteFlags) (*auditDB, error) {
	lim := advisory.DefaultLimits
	if fi, err := os.Stat(arg); err == nil {
		switch {
		case fi.IsDir() && !isLayout(arg):
			if len(keys) > 0 {
				return nil, fmt.Errorf("--key verifies a database package; %s is a folder of records", arg)
			}
			db, err := advisory.LoadDir(arg, lim)
			if err != nil {
				return nil, err
			}
			if db.Len() == 0 {
				return nil, fmt.Errorf("%s holds no OSV record", arg)
			}
			return &auditDB{Source: arg, Date: db.Date(), Records: db.Len(), db: db}, nil
		case fi.Mode().IsRegular() && strings.EqualFold(filepath.Ext(arg), ".zip"):
			if len(keys) > 0 {
				return nil, fmt.Errorf("--key verifies a database package; %s is a zip of records", arg)
			}
			file, err := os.Open(arg)
			if err != nil {
				return nil, err
			}
			defer file.Close()
			db, err := advisory.Load(file, fi.Size(), lim)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", arg, err)
			}
			return &auditDB{Source: arg, Date: db.Date(), Records: db.Len(), db: db}, nil
		}
	}
	if len(keys) > 0 {
		vk, err := cli.LoadVerifyKeys(keys)
		if err != nil {
			return nil, err
		}
		src, ref, err := cli.OpenSource(cmd, arg, remote)
		if err != nil {
			return nil, err
		}
		progress, done := cli.NewProgress(cmd)
		_, err = artifact.Verify(cmd.Context(), src, ref, artifact.VerifyOptions{Keys: vk, Progress: progress})
		done()
		if err != nil {
			return nil, err
		}
	}
	src, ref, err := cli.OpenSource(cmd, arg, remote)
	if err != nil {
		return nil, err
	}
	db, _, err := advisory.ReadPackage(cmd.Context(), src, ref, lim)
	if err != nil {
		return nil, err
	}
	return &auditDB{Source: arg, Date: db.Date(), Records: db.Len(), db: db}, nil
}

// deployedDB reads the advisory database deployed in the cluster run scans.
func deployedDB(cmd *cobra.Command, run *scanRun) (*auditDB, error) {
	db, recs, err := run.db(cmd.Context())
	if err != nil {
		return nil, err
	}
	var srcs []string
	for _, r := range recs {
		srcs = append(srcs, r.Source)
	}
	return &auditDB{Source: "deployed in the cluster (" + strings.Join(srcs, ", ") + ")", Date: db.Date(), Records: db.Len(), db: db}, nil
}

// isLayout reports whether dir is an OCI layout (a package folder).
func isLayout(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "oci-layout"))
	return err == nil
}

// printFindings writes the database line, a warning when it is stale, and
// the findings as a table.
func printFindings(w io.Writer, db *auditDB, maxAge time.Duration, fs []bomscan.Finding) error {
	age := time.Since(db.Date)
	fmt.Fprintf(w, "advisory database %s: %d records, newest of %s (%s old)\n", cli.Cell(db.Source), db.Records, db.Date.UTC().Format("2006-01-02"), days(age))
	if db.Stale {
		fmt.Fprintf(w, "warning: the advisory database is %s old, more than --max-age %s: carry a newer one\n", days(age), days(maxAge))
	}
	if len(fs) == 0 {
		_, err := fmt.Fprintln(w, "no findings")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADVISORY\tCOMPONENT\tINSTALLED → FIXED\tPACKAGE\tIMAGE\tPLATFORM\tRUNS")
	var ids []string
	for _, f := range fs {
		fixed := f.Match.Fixed
		if fixed == "" {
			fixed = "no fix"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s %s\t%s\t%s\t%s\n", cli.Cell(f.Match.ID), cli.Cell(f.Component.Name), cli.Cell(f.Component.Version), cli.Cell(fixed),
			cli.Cell(f.Package), cli.Cell(f.Version), cli.Cell(f.Image), cli.Cell(f.Platform), runs(f.Runs))
		ids = append(ids, f.Match.ID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	slices.Sort(ids)
	_, err := fmt.Fprintf(w, "%s of %s\n", plural(len(fs), "finding"), plural(len(slices.Compact(ids)), "advisory"))
	return err
}

// days says a duration in days (hours under two days).
func days(d time.Duration) string {
	if d < 48*time.Hour {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// plural is "1 finding", "2 findings", "2 advisories".
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
