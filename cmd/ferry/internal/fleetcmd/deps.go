// Package fleetcmd is the fleet's commands (`ferry fleet …`): those of the
// centre act on the management cluster, those of a member (join, status,
// report) on the member's own. The full binary gives them its cluster
// flags and its way to the in-cluster registry (Deps).
package fleetcmd

import (
	"fmt"
	"log/slog"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kube is a command's cluster flags (--kubeconfig, --context).
type Kube interface {
	Client() (kubernetes.Interface, error)
	ClientConfig() (kubernetes.Interface, *rest.Config, error)
}

// OpenRegistry opens the way to the in-cluster registry of namespace ns:
// the registry, a function adding the way's own failure to an error, and
// one closing the way.
type OpenRegistry func(cmd *cobra.Command, cs kubernetes.Interface, cfg *rest.Config, ns string) (reg registry.Registry, cause func(error) error, done func(), err error)

// Deps is what the fleet's commands take from the full binary.
type Deps struct {
	// Kube registers the cluster flags on cmd.
	Kube func(cmd *cobra.Command) Kube
	// Registry registers on cmd the flags saying how to reach the
	// in-cluster registry (--registry-via) and returns the way to open it.
	Registry func(cmd *cobra.Command) OpenRegistry
	// PackageClient is a quiet client of the Package API; QuietClients
	// silences controller-runtime's logger for other clients.
	PackageClient func(*rest.Config) (client.WithWatch, error)
	QuietClients  func()
	// Logger is a long-running command's JSON log on stderr.
	Logger func(cmd *cobra.Command) *slog.Logger
}

var deps Deps

// New returns `ferry fleet` and its commands.
func New(d Deps) *cobra.Command {
	deps = d
	return newFleetCmd()
}

// registryFlags name the centre's registry and how to reach it.
type registryFlags struct {
	host   string
	remote cli.RemoteFlags
}

func (f *registryFlags) register(cmd *cobra.Command, usage string) {
	f.remote.Register(cmd)
	cmd.Flags().StringVar(&f.host, "registry", "", usage)
}

// set gives c the registry; without --registry it is an error saying why
// (need), or nothing when need is empty.
func (f *registryFlags) set(cmd *cobra.Command, c *centre.Centre, need string) error {
	if f.host == "" {
		if need == "" {
			return nil
		}
		return fmt.Errorf("--registry is required: %s", need)
	}
	ro, err := f.remote.Options(cmd, f.host)
	if err != nil {
		return err
	}
	c.Registry, c.Remote = f.host, ro
	return nil
}
