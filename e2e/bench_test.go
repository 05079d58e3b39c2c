package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/deploy/upload"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// writeImages writes an OCI layout at dir holding one image of mib MiB of
// random 50 MiB layers (seeded), tagged tag.
func writeImages(ctx context.Context, b *testing.B, dir string, mib int, seed uint64, tag string) {
	b.Helper()
	store, err := oci.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	rng := fixture.Rand(seed)
	var layers []fixture.Layer
	for range mib / 50 {
		layers = append(layers, fixture.NewLayer(rng, 50<<20))
	}
	d, err := fixture.PushImage(ctx, store, fixture.Platform("linux", runtime.GOARCH, ""), layers)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Tag(ctx, d, tag); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDeploy measures the image push of `ferry deploy` of a generated
// package (FERRY_BENCH_DEPLOY_MIB, default 500 MiB) into the in-cluster
// registry through the NodePort, beside `crane push` of an image of the
// same size (other random content, so neither finds the other's blobs) to
// the same NodePort in the same run, then an unchanged redeploy.
// Budget (issue 8): push throughput ≥ 0.8× crane's; the redeploy pushes 0
// bytes and takes < 10 s.
func BenchmarkDeploy(b *testing.B) {
	c := harness.Get(b)
	crane := peertool.Require(b, "crane")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	benchenv.Quiet(b, 4)
	defer cancel()
	mib := benchMiB()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(b)}); err != nil {
		b.Fatal(err)
	}
	host := cluster.RegistryHost(cluster.DefaultNodePort)

	// crane reads the registry account from a docker config.
	sec, err := c.Client.CoreV1().Secrets(cluster.DefaultNamespace).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	dockerDir := b.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(string(sec.Data["username"]) + ":" + string(sec.Data["password"])))
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
	if err := os.WriteFile(filepath.Join(dockerDir, "config.json"), cfg, 0o600); err != nil {
		b.Fatal(err)
	}

	dir := b.TempDir()
	// Fresh content each run: nothing of an earlier run may be found.
	seed := uint64(time.Now().UnixNano())
	writeImages(ctx, b, filepath.Join(dir, "crane"), mib, seed, "1")
	writeImages(ctx, b, filepath.Join(dir, "images"), mib, seed+1, "1.0")
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: e2e-bench, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: big\n    images:\n      - {ref: docker.io/library/big:1.0, layout: images}\n", runtime.GOARCH)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		b.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	priv, pub := testKeys(b)
	pkg := filepath.Join(b.TempDir(), "bench.tar.zst")
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, SignKey: priv}); err != nil {
		b.Fatal(err)
	}
	st := &rollout.State{Client: c.Client, Namespace: cluster.DefaultNamespace}
	b.Cleanup(func() {
		ctx := context.Background()
		for _, repo := range []string{"bench/crane", "bench/crane2"} {
			cmd := exec.CommandContext(ctx, crane, "delete", host+"/"+repo+"@"+craneDigest(crane, dockerDir, host+"/"+repo))
			cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerDir)
			_ = cmd.Run()
		}
		if rec, _ := st.Get(ctx, "e2e-bench"); rec != nil {
			kube := genericclioptions.NewConfigFlags(true)
			kube.KubeConfig = &c.Kubeconfig
			if _, err := removePkg(ctx, c, "e2e-bench"); err != nil {
				b.Errorf("remove: %v", err)
			}
		}
	})

	cranePush := func(repo string) time.Duration {
		cmd := exec.CommandContext(ctx, crane, "push", filepath.Join(dir, "crane"), host+"/"+repo+":1")
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerDir)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("crane push: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	for range b.N {
		// crane before and after ferry (to fresh repositories each time: a
		// registry links blobs per repository), so neither order favours it.
		craneTook := cranePush("bench/crane")
		r, err := artifact.Open(ctx, pkg)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		rec, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}})
		if err != nil {
			b.Fatal(err)
		}
		deployTook := time.Since(start)
		craneTook = (craneTook + cranePush("bench/crane2")) / 2

		start = time.Now()
		again, err := deployPkg(ctx, c, r, deploy.Deploy{Keys: []*artifact.PublicKey{pub}})
		if err != nil {
			b.Fatal(err)
		}
		redeployTook := time.Since(start)

		mb := float64(mib) * (1 << 20) / 1e6
		ratio := craneTook.Seconds() / rec.PushTook.Seconds()
		fmt.Printf("deploy %d MiB: push %.2fs (%.0f MB/s), crane push (mean of 2) %.2fs (%.0f MB/s): throughput ratio %.2f (budget ≥ 0.80); whole deploy %.2fs; unchanged redeploy %.2fs, %d bytes pushed (budget 0 bytes, < 10 s)\n",
			mib, rec.PushTook.Seconds(), mb/rec.PushTook.Seconds(), craneTook.Seconds(), mb/craneTook.Seconds(), ratio, deployTook.Seconds(), redeployTook.Seconds(), again.BytesPushed)
		b.ReportMetric(ratio, "push-x-crane-throughput")
		b.ReportMetric(redeployTook.Seconds(), "redeploy-s")
		if ratio < 0.8 {
			b.Errorf("push throughput %.2f× crane's, budget ≥ 0.8", ratio)
		}
		if again.BytesPushed != 0 || redeployTook >= 10*time.Second {
			b.Errorf("unchanged redeploy pushed %d bytes in %s; budget 0 bytes, < 10 s", again.BytesPushed, redeployTook)
		}
	}
}

func craneDigest(crane, dockerDir, repo string) string {
	cmd := exec.Command(crane, "digest", repo+":1")
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerDir)
	out, _ := cmd.Output()
	return string(out[:max(0, len(out)-1)])
}

// BenchmarkUpload compares `ferry deploy --via-agent` (one HTTPS stream to
// the agent, which verifies, pushes and applies) with `ferry deploy` from
// the node (verify here, push through the NodePort, apply) on packages of
// the same size (FERRY_BENCH_DEPLOY_MIB, default 500 MiB; other random
// content each, so neither finds the other's blobs), each until Ready.
// Then it uploads 100 MiB and 1 GiB packages and reports the agent's peak
// RSS after each (issue 20: it stays flat: the upload is spooled to disk).
func BenchmarkUpload(b *testing.B) {
	c := harness.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	benchenv.Quiet(b, 4)
	defer cancel()
	mib := benchMiB()
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: binDir(b)}); err != nil {
		b.Fatal(err)
	}
	priv, pub, _ := trustNewKey(ctx, b, c)
	uploader := tokenKubeconfig(ctx, b, c, "e2e-uploader", uploaderRules)
	seed := uint64(time.Now().UnixNano())
	var names []string
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, n := range names {
			if _, _, err := deploy.DeletePackage(context.Background(), pc, cluster.DefaultNamespace, n); err != nil {
				b.Logf("remove %s: %v", n, err)
			}
		}
	})
	bigPackage := func(name string, mib int) string {
		seed++
		names = append(names, name)
		return imagePackage(ctx, b, name, mib, seed, priv)
	}
	run := func(kubeconfig string, v any, args ...string) time.Duration {
		start := time.Now()
		args = append(args, "--kubeconfig", kubeconfig, "-o", "json")
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(b), "ferry"), args...).Output()
		if err != nil {
			b.Fatalf("ferry %v: %v: %s", args, err, exitStderr(err))
		}
		if err := json.Unmarshal(out, v); err != nil {
			b.Fatalf("ferry %v printed %q: %v", args, out, err)
		}
		return time.Since(start)
	}
	for range b.N {
		viaNode := bigPackage("e2e-bench-node", mib)
		viaAgent := bigPackage("e2e-bench-agent", mib)
		var rec rollout.Record
		nodeTook := run(c.Kubeconfig, &rec, "deploy", viaNode, "--key", pub.Name)
		var res upload.Result
		agentTook := run(uploader, &res, "deploy", viaAgent, "--via-agent")
		ratio := agentTook.Seconds() / nodeTook.Seconds()
		fmt.Printf("deploy %d MiB until Ready: from the node %.2fs; uploaded through the agent %.2fs (receive %.2fs, verify %.2fs, push %.2fs, ready %.2fs): %.2f× (reported, no budget set)\n",
			mib, nodeTook.Seconds(), agentTook.Seconds(), res.Took.Receive.Seconds(), res.Took.Verify.Seconds(), res.Took.Push.Seconds(), res.Took.Ready.Seconds(), ratio)
		b.ReportMetric(ratio, "upload-x-deploy")
		for _, size := range []int{100, 1024} {
			var r upload.Result
			took := run(uploader, &r, "deploy", bigPackage(fmt.Sprintf("e2e-bench-rss-%d", size), size), "--via-agent")
			fmt.Printf("upload %d MiB through the agent: %.2fs, agent peak RSS %.0f MiB (budget: flat)\n", size, took.Seconds(), float64(r.AgentPeakRSS)/(1<<20))
			b.ReportMetric(float64(r.AgentPeakRSS)/(1<<20), fmt.Sprintf("agent-peak-MiB-%d", size))
		}
	}
}

// imagePackage creates a package signed by priv holding one image
// docker.io/library/NAME:1.0 of mib MiB of random layers (from seed).
func imagePackage(ctx context.Context, b *testing.B, name string, mib int, seed uint64, priv *key.Private) string {
	b.Helper()
	dir := b.TempDir()
	writeImages(ctx, b, filepath.Join(dir, "images"), mib, seed, "1.0")
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: big\n    images:\n      - {ref: docker.io/library/%s:1.0, layout: images}\n", name, runtime.GOARCH, name)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		b.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	pkg := filepath.Join(b.TempDir(), name+".tar.zst")
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: pkg, SignKey: priv}); err != nil {
		b.Fatal(err)
	}
	return pkg
}
