package e2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/portforward"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
)

// BenchmarkTunnel measures, in one run on the e2e cluster, how long a
// tunnel to the registry takes to open (median and worst of 10; budget
// < 1 s), and deploy's image push of FERRY_BENCH_DEPLOY_MIB (default 500)
// MiB through the NodePort, through the tunnel (the API server's
// pods/proxy), through the tunnel as a port-forward (--registry-via
// port-forward), and through what `kubectl port-forward` opens (client-go's
// PortForwarder, the same WebSocket dialer with SPDY fallback): four
// packages of other random content, so none finds another's blobs.
// Asserted: the tunnel's push takes ≤ 1.5× the NodePort's (issue 32), and
// ferry's port-forward is no slower than kubectl's (≤ 1.2×, the noise of
// one run).
func BenchmarkTunnel(b *testing.B) {
	c := harness.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	benchenv.Quiet(b, 4)
	mib := benchMiB()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(b)}); err != nil {
		b.Fatal(err)
	}

	var opens []time.Duration
	for range 10 {
		start := time.Now()
		ep, err := reach.Registry(ctx, c.Client, reach.Options{Via: reach.Tunnel, Config: c.Config})
		if err != nil {
			b.Fatal(err)
		}
		if err := reach.WaitRegistry(ctx, ep.Host, 10*time.Second); err != nil { // a first request through it
			b.Fatal(err)
		}
		opens = append(opens, time.Since(start))
		ep.Close()
	}
	slices.Sort(opens)

	priv, pub := testKeys(b)
	seed := uint64(time.Now().UnixNano())
	mkPkg := func(name string, seed uint64) string { return imagePackage(ctx, b, name, mib, seed, priv) }
	viaNodePort, viaTunnel, viaKubectl := mkPkg("e2e-bench-nodeport", seed), mkPkg("e2e-bench-tunnel", seed+1), mkPkg("e2e-bench-kubectl", seed+2)
	viaPortForward := mkPkg("e2e-bench-portforward", seed+3)
	b.Cleanup(func() {
		for _, n := range []string{"e2e-bench-nodeport", "e2e-bench-tunnel", "e2e-bench-kubectl", "e2e-bench-portforward"} {
			if _, err := removePkg(context.Background(), c, n); err != nil {
				b.Errorf("remove %s: %v", n, err)
			}
		}
	})
	pushTo := func(pkg, host string) *rollout.Record {
		r, err := artifact.Open(ctx, pkg)
		if err != nil {
			b.Fatal(err)
		}
		rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}, Registry: host})
		if err != nil {
			b.Fatal(err)
		}
		return rec
	}
	push := func(pkg string, via reach.Via) (*rollout.Record, *reach.Endpoint) {
		ep, err := reach.Registry(ctx, c.Client, reach.Options{Via: via, Config: c.Config})
		if err != nil {
			b.Fatal(err)
		}
		defer ep.Close()
		return pushTo(pkg, ep.Host), ep
	}
	for range b.N {
		np, _ := push(viaNodePort, reach.NodePort)
		tn, ep := push(viaTunnel, reach.Tunnel)
		if ep.Protocol != kube.ProtocolProxy {
			b.Errorf("the tunnel is %s, not the pods/proxy (%s)", ep.Protocol, ep.ProxyError)
		}
		pf, pep := push(viaPortForward, reach.PortForward)
		addr, stop := kubectlForward(b, c, pep.Pod)
		kc := pushTo(viaKubectl, addr)
		stop()
		mb := float64(mib) * (1 << 20) / 1e6
		rate := func(r *rollout.Record) string {
			return fmt.Sprintf("%.2fs (%.0f MB/s)", r.PushTook.Seconds(), mb/r.PushTook.Seconds())
		}
		ratio := tn.PushTook.Seconds() / np.PushTook.Seconds()
		pfRatio := pf.PushTook.Seconds() / np.PushTook.Seconds()
		vsKubectl := pf.PushTook.Seconds() / kc.PushTook.Seconds()
		fmt.Printf("tunnel: ready (first request answered) in median %.3fs, worst %.3fs of %d (budget < 1 s); push of %d MiB through the NodePort %s, through the tunnel (%s) %s: %.2f× (budget ≤ 1.5×); through a port-forward (%s) %s: %.2f×, through kubectl port-forward's PortForwarder %s: ferry's port-forward takes %.2f× its time (budget ≤ 1.2×)\n",
			opens[len(opens)/2].Seconds(), opens[len(opens)-1].Seconds(), len(opens), mib, rate(np), ep.Protocol, rate(tn), ratio,
			pep.Protocol, rate(pf), pfRatio, rate(kc), vsKubectl)
		b.ReportMetric(ratio, "tunnel-x-nodeport-push-time")
		b.ReportMetric(pfRatio, "portforward-x-nodeport-push-time")
		b.ReportMetric(vsKubectl, "portforward-x-kubectl-push-time")
		b.ReportMetric(opens[len(opens)-1].Seconds(), "tunnel-ready-worst-s")
		if ratio > 1.5 {
			b.Errorf("push through the tunnel took %.2f× the NodePort's, budget ≤ 1.5×", ratio)
		}
		if vsKubectl > 1.2 {
			b.Errorf("push through the port-forward took %.2f× kubectl port-forward's, budget ≤ 1.2×", vsKubectl)
		}
		if opens[len(opens)-1] >= time.Second {
			b.Errorf("a tunnel took %s to be ready, budget < 1 s", opens[len(opens)-1])
		}
	}
}

// kubectlForward opens what `kubectl port-forward POD :5000` opens:
// client-go's PortForwarder over kubectl's dialer (kube.PortForwardDialer),
// to pod (namespace/name) on the registry's port. It returns the local
// address and a function that stops it.
func kubectlForward(b *testing.B, c *harness.Cluster, pod string) (string, func()) {
	b.Helper()
	ns, name, _ := strings.Cut(pod, "/")
	dialer, _, err := kube.PortForwardDialer(c.Config, ns, name)
	if err != nil {
		b.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", cluster.RegistryPort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errc:
		b.Fatalf("port-forward to %s: %v", pod, err)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		b.Fatalf("port-forward to %s: ports %v: %v", pod, ports, err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), func() { close(stop); <-errc }
}
