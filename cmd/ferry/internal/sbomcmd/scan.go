// Package sbomcmd is `ferry sbom …`: search (query) and audit of the SBOMs
// of a package, a registry, a cluster or the fleet's centre. The full
// binary gives it its cluster flags and way to the in-cluster registry
// (Deps).
package sbomcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	deploybomscan "github.com/ferrypkg/ferry/deploy/bomscan"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// ExitFindings is `ferry sbom audit`'s exit status when it finds
// something (1 is an error, 0 nothing found).
const ExitFindings = 3

// Kube is a command's cluster flags (--kubeconfig, --context).
type Kube interface {
	ClientConfig() (kubernetes.Interface, *rest.Config, error)
}

// OpenRegistry opens the way to the in-cluster registry of namespace ns:
// the registry, a function adding the way's own failure to an error, and
// one closing the way.
type OpenRegistry func(cmd *cobra.Command, cs kubernetes.Interface, cfg *rest.Config, ns string) (reg registry.Registry, cause func(error) error, done func(), err error)

// Deps is what the sbom commands take from the full binary.
type Deps struct {
	// Kube registers the cluster flags on cmd.
	Kube func(cmd *cobra.Command) Kube
	// Registry registers the flags saying how to reach the in-cluster
	// registry (--registry-via) and returns the way to open it.
	Registry func(cmd *cobra.Command) OpenRegistry
	// PackageClient is a quiet client of the Package API; QuietClients
	// silences controller-runtime's logger for other clients.
	PackageClient func(*rest.Config) (client.WithWatch, error)
	QuietClients  func()
	// RegistryArg splits host[:port][/PREFIX]; ok is false for what is
	// not a registry.
	RegistryArg func(arg string) (host, prefix string, ok bool)
}

var deps Deps

// New returns `ferry sbom` and its commands.
func New(d Deps) *cobra.Command {
	deps = d
	return newSBOMGroupCmd()
}

func newSBOMGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sbom",
		Short: "Search and audit the SBOMs of a package, a registry, a cluster or the fleet",
		Long: `Search the SBOMs that packages carry (ferry sbom query) and audit them against
an advisory database carried across the air gap (ferry sbom audit): in a
package, in a registry's packages, in what a cluster runs (--cluster) or
in what the fleet's centre holds (--fleet). A cluster and a centre keep an
index of their SBOMs in their registry, made again from the SBOMs when it
is missing.`,
	}
	cmd.AddCommand(newSBOMQueryCmd(), newSBOMAuditCmd())
	return cmd
}

// scanFlags name where the SBOMs are: a package argument, --registry,
// --cluster or --fleet.
type scanFlags struct {
	kube      Kube
	open      OpenRegistry
	remote    cli.RemoteFlags
	registry  string
	inCluster bool
	fleet     bool
	namespace string
	rebuild   bool
}

func (f *scanFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.registry, "registry", "", "a registry's packages (host[:port][/PREFIX]); with --fleet, the centre's registry")
	cmd.Flags().BoolVar(&f.inCluster, "cluster", false, "what the cluster runs: its Packages, in its in-cluster registry")
	cmd.Flags().BoolVar(&f.fleet, "fleet", false, "what the fleet's centre holds: its release tracks' versions, in its registry (--registry), where members run them")
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", "", "ferry's namespace with --cluster (default "+cluster.DefaultNamespace+"), the centre's with --fleet (default "+centre.DefaultNamespace+")")
	cmd.Flags().BoolVar(&f.rebuild, "rebuild", false, "make the cluster's or centre's index again from the SBOMs")
	f.kube = deps.Kube(cmd)
	f.open = deps.Registry(cmd)
	f.remote.Register(cmd)
}

// scanner makes the scanner of the SBOMs args and f name; done closes
// what it opened, cause adds a tunnel's failure to an error.
// scanRun is a scanner with what it opened: done closes it, cause adds a
// tunnel's failure to an error, db (--cluster only) reads the advisory
// database deployed in the cluster.
type scanRun struct {
	s     *bomscan.Scanner
	done  func()
	cause func(error) error
	db    func(context.Context) (*advisory.DB, []artifact.Advisories, error)
}

func (f *scanFlags) scanner(cmd *cobra.Command, args []string) (*scanRun, error) {
	none := func() {}
	same := func(err error) error { return err }
	picked := 0
	for _, b := range []bool{len(args) > 0, f.inCluster, f.fleet, f.registry != "" && !f.fleet} {
		if b {
			picked++
		}
	}
	switch {
	case picked == 0:
		return nil, errors.New("name the SBOMs to read: a package or reference, --registry, --cluster or --fleet")
	case picked > 1:
		return nil, errors.New("name one place to read SBOMs from: a package or reference, --registry, --cluster or --fleet")
	case f.rebuild && !f.inCluster && !f.fleet:
		return nil, errors.New("--rebuild makes a cluster's or the centre's index again: add --cluster or --fleet")
	case f.namespace != "" && !f.inCluster && !f.fleet:
		return nil, errors.New("--namespace names ferry's namespace with --cluster or the centre's with --fleet")
	}
	switch {
	case len(args) > 0:
		src, ref, err := cli.OpenSource(cmd, args[0], f.remote)
		if err != nil {
			return nil, err
		}
		return &scanRun{s: &bomscan.Scanner{Source: bomscan.PackageSource(src, ref)}, done: none, cause: same}, nil
	case f.inCluster:
		ns := f.namespace
		if ns == "" {
			ns = cluster.DefaultNamespace
		}
		cs, cfg, err := f.kube.ClientConfig()
		if err != nil {
			return nil, err
		}
		pc, err := deps.PackageClient(cfg)
		if err != nil {
			return nil, err
		}
		reg, cause, closeReg, err := f.open(cmd, cs, cfg, ns)
		if err != nil {
			return nil, err
		}
		s := deploybomscan.Cluster(pc, ns, reg)
		s.Rebuild = f.rebuild
		return &scanRun{s: s, done: closeReg, cause: cause,
			db: func(ctx context.Context) (*advisory.DB, []artifact.Advisories, error) {
				return deploybomscan.ClusterDB(ctx, pc, ns, reg)
			}}, nil
	case f.fleet:
		if f.registry == "" {
			return nil, errors.New("--registry is required with --fleet: the centre's registry (host[:port])")
		}
		ns := f.namespace
		if ns == "" {
			ns = centre.DefaultNamespace
		}
		_, cfg, err := f.kube.ClientConfig()
		if err != nil {
			return nil, err
		}
		deps.QuietClients()
		sch := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(sch); err != nil {
			return nil, err
		}
		if err := fleetv1.AddToScheme(sch); err != nil {
			return nil, err
		}
		c, err := client.New(cfg, client.Options{Scheme: sch})
		if err != nil {
			return nil, fmt.Errorf("the management cluster: %w", err)
		}
		ro, err := f.remote.Options(cmd, f.registry)
		if err != nil {
			return nil, err
		}
		reg, err := ro.Registry(f.registry)
		if err != nil {
			return nil, err
		}
		s := deploybomscan.Fleet(c, ns, reg)
		s.Rebuild = f.rebuild
		return &scanRun{s: s, done: none, cause: same}, nil
	}
	host, prefix, ok := deps.RegistryArg(f.registry)
	if !ok {
		return nil, fmt.Errorf("--registry %q is not a registry (host[:port][/PREFIX])", f.registry)
	}
	ro, err := f.remote.Options(cmd, host)
	if err != nil {
		return nil, err
	}
	reg, err := ro.Registry(host)
	if err != nil {
		return nil, err
	}
	return &scanRun{s: &bomscan.Scanner{Source: bomscan.RegistrySource(reg, prefix)}, done: none, cause: same}, nil
}

// withProgress shows the SBOMs read on a terminal (or as JSON lines with
// -o json), and tells on stderr why an index could not be saved.
func withProgress(cmd *cobra.Command, s *bomscan.Scanner) func() {
	progress, done := cli.NewProgress(cmd)
	if progress != nil {
		s.Progress = func(n, total int) {
			progress(artifact.Progress{Phase: "read", Item: fmt.Sprintf("SBOMs %d/%d", n, total)})
		}
	}
	s.OnSaveError = func(err error) {
		done()
		fmt.Fprintf(cmd.ErrOrStderr(), "ferry: warning: the SBOM index was not saved (the next search reads the SBOMs again): %s\n", cli.OneLine(err))
	}
	return done
}

func newSBOMQueryCmd() *cobra.Command {
	var (
		f      scanFlags
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "query QUERY [PKG|REF]",
		Short: "Find which images contain a component, and where they run",
		Example: `  # Which images of the package hold golang.org/x/net below 0.38.0
  ferry sbom query 'pkg:golang/golang.org/x/net@<0.38.0' app-1.0.0.tar.zst

  # Every package of a registry holding Debian's openssl
  ferry sbom query pkg:deb/debian/openssl --registry registry.local:5000

  # In the cluster (which Pods run it) and across the fleet (which members)
  ferry sbom query openssl --cluster
  ferry sbom query openssl --fleet --registry centre.example:5000 -o json`,
		Long: `Search the SBOMs of a package (an archive, a layout folder or a registry
reference), of every package of a registry (--registry host[/PREFIX]), of
what a cluster runs (--cluster: its Packages, read from its in-cluster
registry) or of what the fleet's centre holds (--fleet: its release
tracks' versions in its registry, --registry). QUERY is a package URL,
optionally with a version range (pkg:golang/golang.org/x/net@<0.38.0,
pkg:deb/debian/openssl), or a name alone.

Each answer names the package, its version, the image and platform, the
component's name, version and package URL, and (--cluster, --fleet)
where it runs: the Package and the Pods running the image, or the
members reporting that version. A cluster and a centre keep an index of
their SBOMs (repository ferry/sbom-index, or ferry-fleet/sbom-index in
the centre's registry): a search reads only the SBOMs it lacks, and
--rebuild makes it again from the SBOMs.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			q, err := bom.ParseQuery(args[0])
			if err != nil {
				return fmt.Errorf("QUERY %q: %w", args[0], err)
			}
			run, err := f.scanner(cmd, args[1:])
			if err != nil {
				return err
			}
			defer run.done()
			stop := withProgress(cmd, run.s)
			hits, err := run.s.Query(cmd.Context(), q)
			stop()
			if err != nil {
				return run.cause(err)
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), hits)
			}
			return printHits(cmd.OutOrStdout(), q, hits)
		},
	}
	f.register(cmd)
	output.Register(cmd)
	return cmd
}

// printHits writes hits as a table.
func printHits(w io.Writer, q bom.Query, hits []bomscan.Hit) error {
	if len(hits) == 0 {
		_, err := fmt.Fprintf(w, "no SBOM lists %s\n", cli.Cell(q.String()))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PACKAGE\tIMAGE\tPLATFORM\tCOMPONENT\tVERSION\tPURL\tRUNS")
	for _, h := range hits {
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\t%s\t%s\n", cli.Cell(h.Package), cli.Cell(h.Version), cli.Cell(h.Image), cli.Cell(h.Platform),
			cli.Cell(h.Component.Name), cli.Cell(h.Component.Version), cli.Cell(h.Component.PURL), runs(h.Runs))
	}
	return tw.Flush()
}

// runs shows where an image runs in one cell.
func runs(rs []string) string {
	if len(rs) == 0 {
		return "-"
	}
	cells := make([]string, len(rs))
	for i, r := range rs {
		cells[i] = cli.Cell(r)
	}
	return strings.Join(cells, ", ")
}
