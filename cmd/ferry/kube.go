package main

import "k8s.io/cli-runtime/pkg/genericclioptions"

// getter gives what Helm and server-side apply take: the same kubeconfig
// and context as client.
func (f *kubeFlags) getter() *genericclioptions.ConfigFlags {
	g := genericclioptions.NewConfigFlags(true)
	g.KubeConfig, g.Context = &f.kubeconfig, &f.context
	return g
}
