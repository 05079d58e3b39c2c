package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

func newRegistryConnectCmd() *cobra.Command {
	var (
		kube      kubeFlags
		output    cli.OutputFlag
		via       viaFlag
		namespace string
		addr      string
	)
	cmd := &cobra.Command{
		Use:   "connect",
		Short: "Open a tunnel to the in-cluster registry and keep it open until Ctrl-C",
		Long: `Open a tunnel through the API server to a ready Pod of the registry that
` + "`ferry init`" + ` set up, listen on 127.0.0.1 (a free port, or --addr), print the
address and how to log in, and keep it open until Ctrl-C (or SIGTERM). crane,
oras, helm, skopeo and ferry itself then work with the in-cluster registry
from a workstation that reaches only the API server. The registry's account
is in the Secret ferry-registry-auth of ferry's namespace (username,
password); a tunnel that drops is opened again on the next connection, to
any ready registry Pod. With -o json, one JSON document is printed once the
tunnel is ready.`,
		Example: `  ferry registry connect --addr 127.0.0.1:5000 &
  kubectl -n ferry get secret ferry-registry-auth -o jsonpath='{.data.password}' | base64 -d |
    ferry registry login 127.0.0.1:5000 -u ferry --password-stdin
  crane catalog 127.0.0.1:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			cs, cfg, err := kube.clientConfig()
			if err != nil {
				return err
			}
			ep, err := via.open(cmd, cs, cfg, namespace, "", addr)
			if err != nil {
				return err
			}
			defer ep.Close()
			_, account, err := cluster.ReadRegistry(cmd.Context(), cs.CoreV1().Secrets(namespace))
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output.JSON() {
				err = cli.WriteJSON(out, struct {
					Address  string `json:"address"`
					Username string `json:"username"`
					// Secret holds the account: namespace/name, keys
					// username and password.
					Secret   string    `json:"secret"`
					Via      reach.Via `json:"via"`
					Pod      string    `json:"pod,omitempty"`
					Protocol string    `json:"protocol,omitempty"`
					Seconds  float64   `json:"seconds"`
				}{ep.Host, account.Username, namespace + "/" + cluster.AuthSecretName, ep.Via, ep.Pod, ep.Protocol, ep.Seconds})
				if err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "registry at %s\n", ep)
				fmt.Fprintf(out, "log in:  kubectl -n %s get secret %s -o jsonpath='{.data.password}' | base64 -d | ferry registry login %s -u %s --password-stdin\n",
					namespace, cluster.AuthSecretName, ep.Host, account.Username)
				fmt.Fprintln(out, "press Ctrl-C to close")
			}
			// Until Ctrl-C; tell what goes wrong with the tunnel meanwhile.
			var last string
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-cmd.Context().Done():
					if !output.JSON() {
						fmt.Fprintln(cmd.ErrOrStderr(), "tunnel closed")
					}
					return nil
				case <-tick.C:
					if err := ep.Err(); err != nil && err.Error() != last {
						last = err.Error()
						fmt.Fprintf(cmd.ErrOrStderr(), "ferry: tunnel: %s\n", cli.OneLine(err))
					}
				}
			}
		},
	}
	kube.register(cmd)
	output.Register(cmd)
	via.register(cmd, reach.Tunnel)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "local address of the tunnel (port 0: a free one)")
	return cmd
}
