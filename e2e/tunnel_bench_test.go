package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/e2e/internal/cluster"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/benchenv"
	"github.com/ferrypkg/ferry/internal/reach"
)

// BenchmarkTunnel measures, in one run on the e2e cluster, how long a
// tunnel to the registry takes to open (median and worst of 10; budget
// < 1 s), and deploy's image push of FERRY_BENCH_DEPLOY_MIB (default 500)
// MiB through the tunnel against the same push through the NodePort (two
// packages of other random content, so neither finds the other's blobs).
// Budget (issue 17): the tunnel's push takes ≤ 2× the NodePort's.
func BenchmarkTunnel(b *testing.B) {
	c := cluster.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	benchenv.Quiet(b, 4)
	mib := 500
	if s := os.Getenv("FERRY_BENCH_DEPLOY_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	if _, _, err := initFerry(ctx, c.Client, inject.InitOptions{BinDir: binDir(b)}); err != nil {
		b.Fatal(err)
	}

	var opens []time.Duration
	for range 10 {
		start := time.Now()
		ep, err := reach.Registry(ctx, c.Client, reach.Options{Via: reach.Tunnel, Config: c.Config})
		if err != nil {
			b.Fatal(err)
		}
		if err := inject.WaitRegistry(ctx, ep.Host, 10*time.Second); err != nil { // a first request through it
			b.Fatal(err)
		}
		opens = append(opens, time.Since(start))
		ep.Close()
	}
	slices.Sort(opens)

	priv, pub := testKeys(b)
	seed := uint64(time.Now().UnixNano())
	mkPkg := func(name string, seed uint64) string {
		dir := b.TempDir()
		writeImages(ctx, b, filepath.Join(dir, "images"), mib, seed, "1.0")
		def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: big\n    images:\n      - {ref: docker.io/library/%s:1.0, layout: images}\n", name, runtime.GOARCH, name)
		if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
			b.Fatal(err)
		}
		d, err := artifact.LoadDefinition(dir)
		if err != nil {
			b.Fatal(err)
		}
		pkg := filepath.Join(b.TempDir(), name+".tar.zst")
		if _, err := artifact.Create(ctx, d, artifact.CreateOptions{Charts: chart.Packager{}, Output: pkg, SignKey: priv}); err != nil {
			b.Fatal(err)
		}
		return pkg
	}
	viaNodePort, viaTunnel := mkPkg("e2e-bench-nodeport", seed), mkPkg("e2e-bench-tunnel", seed+1)
	b.Cleanup(func() {
		kube := genericclioptions.NewConfigFlags(true)
		kube.KubeConfig = &c.Kubeconfig
		for _, n := range []string{"e2e-bench-nodeport", "e2e-bench-tunnel"} {
			if _, err := deploy.Remove(context.Background(), c.Client, n, deploy.RemoveOptions{Kube: kube}); err != nil {
				b.Errorf("remove %s: %v", n, err)
			}
		}
	})
	push := func(pkg string, via reach.Via) (*deploy.Record, *reach.Endpoint) {
		ep, err := reach.Registry(ctx, c.Client, reach.Options{Via: via, Config: c.Config})
		if err != nil {
			b.Fatal(err)
		}
		defer ep.Close()
		r, err := artifact.Open(ctx, pkg)
		if err != nil {
			b.Fatal(err)
		}
		rec, err := deploy.Deploy(ctx, c.Client, r, deploy.Options{Keys: []artifact.Verifier{pub}, Registry: ep.Host})
		if err != nil {
			b.Fatal(err)
		}
		return rec, ep
	}
	for range b.N {
		np, _ := push(viaNodePort, reach.NodePort)
		tn, ep := push(viaTunnel, reach.Tunnel)
		mb := float64(mib) * (1 << 20) / 1e6
		ratio := tn.PushTook.Seconds() / np.PushTook.Seconds()
		fmt.Printf("tunnel: ready (first request answered) in median %.3fs, worst %.3fs of %d (budget < 1 s); push of %d MiB through the tunnel (%s) %.2fs (%.0f MB/s), through the NodePort %.2fs (%.0f MB/s): %.2f× (budget ≤ 2×)\n",
			opens[len(opens)/2].Seconds(), opens[len(opens)-1].Seconds(), len(opens), mib, ep.Protocol,
			tn.PushTook.Seconds(), mb/tn.PushTook.Seconds(), np.PushTook.Seconds(), mb/np.PushTook.Seconds(), ratio)
		b.ReportMetric(ratio, "tunnel-x-nodeport-push-time")
		b.ReportMetric(opens[len(opens)-1].Seconds(), "tunnel-ready-worst-s")
		if ratio > 2 {
			b.Errorf("push through the tunnel took %.2f× the NodePort's, budget ≤ 2×", ratio)
		}
		if opens[len(opens)-1] >= time.Second {
			b.Errorf("a tunnel took %s to be ready, budget < 1 s", opens[len(opens)-1])
		}
	}
}
