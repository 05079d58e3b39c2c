package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/kubectl/pkg/drain"

	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// logWriter writes kubectl drain's messages into the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// drainUnderLoad drains the node of a registry Pod as `kubectl drain
// --ignore-daemonsets --delete-emptydir-data --force` does (kubectl's own
// code: cordon, then every Pod evicted through the Eviction API, each
// PodDisruptionBudget respected) while Pods are created on the other
// nodes, each pulling image anew through the agent's rewrite: every one
// must start, with no refused admission and no failed pull. The node is
// uncordoned at the end.
func drainUnderLoad(ctx context.Context, t *testing.T, c *harness.Cluster, image, storage string) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(cluster.RegistryLabels()).String()})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("registry Pods: %d, %v", len(pods.Items), err)
	}
	node := pods.Items[0].Spec.NodeName
	var others []string
	for _, n := range c.Nodes() {
		if n != node {
			others = append(others, n)
		}
	}
	ns := c.Namespace(t)
	load := startPodLoad(ctx, t, c, ns, others, image, 700*time.Millisecond)
	time.Sleep(5 * time.Second)

	h := &drain.Helper{
		Ctx: ctx, Client: c.Client, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		GracePeriodSeconds: -1, Timeout: 4 * time.Minute, Out: logWriter{t}, ErrOut: logWriter{t},
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			h.Ctx = ctx
			_ = drain.RunCordonOrUncordon(h, n, false)
		}
	})
	start := time.Now()
	if err := drain.RunCordonOrUncordon(h, n, true); err != nil {
		t.Fatal(err)
	}
	if err := drain.RunNodeDrain(h, node); err != nil {
		load.Stop(ctx, t, time.Minute)
		t.Fatalf("drain %s: %v", node, err)
	}
	drained := time.Since(start)
	time.Sleep(15 * time.Second)
	count := load.Stop(ctx, t, 2*time.Minute)
	t.Logf("COUNT drain of %s, the registry's node (%s storage, drained in %.1fs): %s", node, storage, drained.Seconds(), count)
	for _, f := range count.Failures {
		t.Errorf("through the drain: %s", f)
	}
	if count.Started < 10 {
		t.Errorf("only %d Pods started through the drain", count.Started)
	}
	after, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(cluster.RegistryLabels()).String()})
	if err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, p := range after.Items {
		if p.DeletionTimestamp == nil {
			where = append(where, p.Name+" on "+p.Spec.NodeName)
		}
	}
	slices.Sort(where)
	t.Logf("registry Pods after the drain: %s", strings.Join(where, ", "))
}
