package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
)

// fleetManifestPackage creates a small signed package of one ConfigMap.
func fleetManifestPackage(ctx context.Context, tb testing.TB, name, version string) string {
	tb.Helper()
	priv, _ := testKeys(tb)
	dir := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		tb.Fatal(err)
	}
	cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {version: %q}\n", name, version)
	if err := os.WriteFile(filepath.Join(dir, "manifests", "cm.yaml"), []byte(cm), 0o644); err != nil {
		tb.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: %s}\ncomponents:\n  - name: app\n    manifests:\n      - {name: cm, namespace: default, files: [manifests]}\n", name, version)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		tb.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(tb.TempDir(), name+"-"+version+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Output: out, Format: artifact.FormatTar, SignKey: priv}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// procStat is a process's CPU time and peak RSS, from /proc.
func procStat(tb testing.TB, pid int) (cpu time.Duration, hwm int64) {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	cpu = time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			hwm = kb << 10
		}
	}
	return cpu, hwm
}

// BenchmarkFleetScale runs the real centre (`ferry fleet serve`, its state
// in the management cluster's real API server) with FERRY_BENCH_MEMBERS
// (default 1,000) members simulated by goroutines speaking the real
// protocol over TLS at a 30 s heartbeat: each joins, then reports its
// package Ready at whatever the centre asks. Budgets (issue 52): the
// centre ≤ 1 core and ≤ 1 GiB over a minute of heartbeats; a placement
// change reaches every member in ≤ 60 s.
func BenchmarkFleetScale(b *testing.B) {
	mc := harness.GetCentre(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("FERRY_BENCH_MEMBERS")); err == nil && v > 0 {
		n = v
	}
	const interval = 30 * time.Second
	fc := &fleetCentre{t: b, c: mc, ferry: filepath.Join(binDir(b), "ferry"), registry: "127.0.0.1:5101", ns: "fleet-bench-" + strconv.FormatInt(time.Now().Unix(), 36)}
	fc.start(ctx, "registry", "registry", "serve", "--addr", fc.registry, "--root", b.TempDir())
	line := fc.start(ctx, "centre", "fleet", "serve", "--kubeconfig", mc.Kubeconfig, "--registry", fc.registry,
		"--addr", "127.0.0.1:8444", "--interval", interval.String(), "-n", fc.ns)
	m := reServing.FindStringSubmatch(line)
	if m == nil {
		b.Fatalf("fleet serve printed %q", line)
	}
	pin := m[2]
	pid := fc.lastPid
	digests := map[string]string{}
	for _, v := range []string{"1.0.0", "2.0.0"} {
		p := fleetManifestPackage(ctx, b, "bench-fleet", v)
		fc.must(ctx, "package", "push", p, fc.registry+"/apps/bench-fleet:"+v)
		r, err := artifact.Open(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		digests[v] = r.Root().Digest.String()
	}
	var tok struct {
		Token string `json:"token"`
	}
	fc.json(ctx, &tok, "fleet", "token", "create", "--uses", strconv.Itoa(n), "--label", "env=bench")
	fc.must(ctx, "fleet", "group", "bench", "--selector", "env=bench")
	fc.must(ctx, "fleet", "promote", "bench-fleet", "stable", digests["1.0.0"], "--repository", "apps/bench-fleet", "--registry", fc.registry)
	fc.must(ctx, "fleet", "place", "bench-fleet", "--track", "bench-fleet", "--channel", "stable", "--group", "bench",
		"--canaries", "0", "--wave-fraction", "100")

	tr := &http.Transport{
		TLSClientConfig:     wire.PinnedTLS(pin, nil),
		MaxIdleConnsPerHost: n,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return harness.DialIn(mc.NetnsPath(), "127.0.0.1:8444", 10*time.Second)
		},
	}
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	url := "https://centre.invalid:8444"
	var (
		seenV2   sync.Map // member → time it was first asked for 2.0.0
		syncErrs atomic.Int64
		syncs    atomic.Int64
	)
	joinStart := time.Now()
	clients := make([]*wire.Client, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key, err := wire.NewSiteKey()
			if err != nil {
				b.Error(err)
				return
			}
			pemb, _ := key.PublicPEM()
			c := &wire.Client{URL: url, Pin: pin, HTTP: hc}
			res, err := c.Join(ctx, wire.JoinRequest{Token: tok.Token, Name: fmt.Sprintf("sim-%04d", i), PublicKey: string(pemb)})
			if err != nil {
				b.Errorf("join %d: %v", i, err)
				return
			}
			c.Credential = res.Credential
			clients[i] = c
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	b.Logf("%d members joined in %.1fs", n, time.Since(joinStart).Seconds())

	// The heartbeats: each member at its own phase of the interval.
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	for i, c := range clients {
		go func() {
			name := fmt.Sprintf("sim-%04d", i)
			target := ""
			select {
			case <-time.After(time.Duration(rand.Int64N(int64(interval)))):
			case <-mctx.Done():
				return
			}
			for {
				rep := &wire.Report{Member: name, Created: time.Now().UTC()}
				if target != "" {
					rep.Packages = []fleetv1.MemberPackage{{Name: "bench-fleet", Placement: "bench-fleet", Digest: target, Target: target, Ready: true}}
				}
				d, err := c.Sync(mctx, rep)
				syncs.Add(1)
				if err != nil {
					if mctx.Err() != nil {
						return
					}
					syncErrs.Add(1)
				} else if len(d.Packages) == 1 {
					target = d.Packages[0].Digest
					if target == digests["2.0.0"] {
						seenV2.LoadOrStore(name, time.Now())
					}
				}
				select {
				case <-time.After(interval):
				case <-mctx.Done():
					return
				}
			}
		}()
	}
	time.Sleep(interval + 10*time.Second) // every member has reported once
	cpu0, _ := procStat(b, pid)
	t0 := time.Now()
	time.Sleep(2 * interval)
	cpu1, hwm := procStat(b, pid)
	cores := (cpu1 - cpu0).Seconds() / time.Since(t0).Seconds()

	// A placement change: how long until every member is asked for it.
	promoted := time.Now()
	fc.must(ctx, "fleet", "promote", "bench-fleet", "stable", digests["2.0.0"], "--registry", fc.registry)
	var reached time.Duration
	for {
		count, last := 0, time.Time{}
		seenV2.Range(func(_, v any) bool {
			count++
			if t := v.(time.Time); t.After(last) {
				last = t
			}
			return true
		})
		if count == n {
			reached = last.Sub(promoted)
			break
		}
		if time.Since(promoted) > 3*time.Minute {
			b.Fatalf("after 3 min, %d of %d members were asked for 2.0.0", count, n)
		}
		time.Sleep(time.Second)
	}
	stop()
	b.ReportMetric(cores, "centre-cores")
	b.ReportMetric(float64(hwm)/(1<<20), "centre-peak-MiB")
	b.ReportMetric(reached.Seconds(), "placement-to-all-s")
	b.ReportMetric(float64(syncErrs.Load()), "sync-errors")
	b.Logf("%d members, %d syncs (%d failed): the centre used %.3f cores, peak RSS %d MiB; 2.0.0 reached all in %.1fs",
		n, syncs.Load(), syncErrs.Load(), cores, hwm>>20, reached.Seconds())
	if cores > 1 || hwm > 1<<30 || reached > time.Minute || syncErrs.Load() > 0 {
		b.Errorf("over budget (≤ 1 core, ≤ 1 GiB, ≤ 60 s, no failed sync)")
	}
}
