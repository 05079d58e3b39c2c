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
		Kube: func(cmd *cobra.Command) fleetcmd.Kube {
			k := &kubeFlags{}
			k.register(cmd)
			return fleetKube{k}
		},
		Registry: func(cmd *cobra.Command) fleetcmd.OpenRegistry {
			via := &viaFlag{}
			via.register(cmd, reach.Auto)
			return func(cmd *cobra.Command, cs kubernetes.Interface, cfg *rest.Config, ns string) (registry.Registry, func(error) error, func(), error) {
				reg, _, ep, err := clusterRegistry(cmd, cs, cfg, via, ns)
				if err != nil {
					return nil, nil, nil, err
				}
				return reg, func(err error) error { return tunnelCause(err, ep) }, func() { ep.Close() }, nil
			}
		},
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
