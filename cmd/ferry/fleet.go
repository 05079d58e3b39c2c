package main

import (
	"log/slog"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/fleetcmd"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// newFleetCmd is `ferry fleet` (package fleetcmd) with this binary's
// cluster flags and way to the in-cluster registry.
func newFleetCmd() *cobra.Command {
	return fleetcmd.New(fleetcmd.Deps{
		Kube:          func(cmd *cobra.Command) fleetcmd.Kube { return clusterKube(cmd) },
		Registry:      func(cmd *cobra.Command) fleetcmd.OpenRegistry { return clusterRegistryOpener(cmd) },
		PackageClient: packageClient,
		QuietClients:  quietClients,
		Logger:        func(cmd *cobra.Command) *slog.Logger { return jsonLogger(cmd, false) },
	})
}

type fleetKube struct{ f *kubeFlags }

func (k fleetKube) Client() (kubernetes.Interface, error) { return k.f.client() }

func (k fleetKube) ClientConfig() (kubernetes.Interface, *rest.Config, error) {
	return k.f.clientConfig()
}

// clusterKube registers this binary's cluster flags on cmd, for the
// command groups in packages of their own (fleetcmd, sbomcmd).
func clusterKube(cmd *cobra.Command) fleetKube {
	k := &kubeFlags{}
	k.register(cmd)
	return fleetKube{k}
}

// clusterRegistryOpener registers --registry-via on cmd and returns how
// those groups open the in-cluster registry: the registry, what a failure
// through the tunnel was caused by, and the tunnel's closing.
func clusterRegistryOpener(cmd *cobra.Command) func(*cobra.Command, kubernetes.Interface, *rest.Config, string) (registry.Registry, func(error) error, func(), error) {
	via := &viaFlag{}
	via.register(cmd, reach.Auto)
	return func(cmd *cobra.Command, cs kubernetes.Interface, cfg *rest.Config, ns string) (registry.Registry, func(error) error, func(), error) {
		reg, _, ep, err := clusterRegistry(cmd, cs, cfg, via, ns)
		if err != nil {
			return nil, nil, nil, err
		}
		return reg, func(err error) error { return tunnelCause(err, ep) }, func() { ep.Close() }, nil
	}
}
