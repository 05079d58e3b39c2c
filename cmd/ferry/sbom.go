package main

import (
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/sbomcmd"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// newSBOMGroupCmd is `ferry sbom` (package sbomcmd) with this binary's
// cluster flags and way to the in-cluster registry.
func newSBOMGroupCmd() *cobra.Command {
	return sbomcmd.New(sbomcmd.Deps{
		Kube: func(cmd *cobra.Command) sbomcmd.Kube {
			k := &kubeFlags{}
			k.register(cmd)
			return fleetKube{k}
		},
		Registry: func(cmd *cobra.Command) sbomcmd.OpenRegistry {
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
		RegistryArg:   registryArg,
	})
}
