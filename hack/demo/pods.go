package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// inCluster is the prefix of every image the in-cluster registry serves.
const inCluster = "127.0.0.1:31999/"

// pods prints every Pod (all namespaces but ferry's) whose containers run
// images of the in-cluster registry, with its node, phase, the image its
// spec names (as the agent rewrote it) and the image its node pulled.
func pods(ctx context.Context, w io.Writer) error {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE/POD\tNODE\tPHASE\tIMAGE\tPULLED")
	n := 0
	for _, p := range list.Items {
		if p.Namespace == "ferry" {
			continue // the registry and the agent
		}
		pulled := map[string]string{}
		for _, c := range p.Status.ContainerStatuses {
			pulled[c.Name] = c.ImageID
		}
		for _, c := range p.Spec.Containers {
			if !strings.HasPrefix(c.Image, inCluster) {
				continue
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, c.Image, pulled[c.Name])
			n++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no Pod runs an image of the in-cluster registry (%s…)", inCluster)
	}
	return nil
}
