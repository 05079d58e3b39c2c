// Command kube is Kubernetes' node and control-plane programs in one
// multi-call binary for ferry's end-to-end cluster: kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kube-proxy, built from
// k8s.io/kubernetes at the version pinned in go.mod.
//
// The program to run is chosen by the name it is called by (a symbolic link
// such as kubelet -> kube) or by its first argument (kube kubelet --config …).
//
// This module has its own go.mod so that ferry's module never depends on
// k8s.io/kubernetes; e2e/cluster/build.sh builds it.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var programs = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	newCmd, ok := programs[name]
	if !ok && len(os.Args) > 1 {
		if newCmd, ok = programs[os.Args[1]]; ok {
			os.Args = os.Args[1:]
		}
	}
	if !ok {
		names := make([]string, 0, len(programs))
		for n := range programs {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "usage: %s {%s} [flags]\n", name, strings.Join(names, "|"))
		os.Exit(2)
	}
	os.Exit(cli.Run(newCmd()))
}
