package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
)

// TestFreshDiskFull fills the in-cluster registry's volume on a fresh
// multi-node cluster (ferry not installed yet): its storage folder is a
// tmpfs mounted here (exec.sh enters only the cluster's network
// namespace: the nodes' kubelets share this mount namespace and see it), resized after init to leave some 40 MiB free.
// Packages of 12 MiB of random bytes are deployed until one is refused:
// in one line naming the registry's free space; Pods on every node still
// pull the images stored; `ferry remove` and its garbage collection free
// the space; the refused package then deploys.
func TestFreshDiskFull(t *testing.T) {
	c := harness.Workstation(t)
	ctx := timeout(t, 15*time.Minute)
	nodes := readyNodes(ctx, t, c)

	dir, err := os.MkdirTemp("", "ferry-e2e-full-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	host := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Large enough for init's images (the registry's, the agent's).
	host("mount", "-t", "tmpfs", "-o", "size=1g,mode=0755", "tmpfs", dir)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	// usage is the tmpfs's used and free bytes, seen from the host.
	usage := func() (used, free, size int64) {
		t.Helper()
		f := strings.Fields(host("df", "-B1", "--output=used,avail,size", dir))
		if len(f) != 6 {
			t.Fatalf("df %s: %q", dir, f)
		}
		n := make([]int64, 3)
		for i := range n {
			if n[i], err = strconv.ParseInt(f[3+i], 10, 64); err != nil {
				t.Fatalf("df %s: %q", dir, f)
			}
		}
		return n[0], n[1], n[2]
	}

	var initRes struct{}
	if err := ferryJSON(ctx, t, c, &initRes, "init", "--bin-dir", binDir(t), "--storage-dir", dir); err != nil {
		t.Fatal(err)
	}
	used, _, _ := usage()
	size := used + 40<<20
	host("mount", "-o", "remount,size="+strconv.FormatInt(size, 10), dir)
	used, free, size := usage()
	t.Logf("registry volume after init: %d MiB used, %d MiB free of %d MiB", used>>20, free>>20, size>>20)

	// Deploy packages of 12 MiB until one is refused.
	type pkg struct{ name, path, pub, image string }
	var deployed []pkg
	var refused pkg
	var refusal string
	for i := 1; i <= 8 && refusal == ""; i++ {
		p := bigPackage(ctx, t, c, fmt.Sprintf("e2e-full-%d", i), 12<<20)
		var rec struct {
			BytesPushed int64 `json:"bytesPushed"`
		}
		err := ferryJSON(ctx, t, c, &rec, "deploy", p.path, "--key", p.pub)
		_, free, _ := usage()
		if err != nil {
			refused, refusal = p, err.Error()
			t.Logf("deploy %s refused with %d MiB free: %s", p.name, free>>20, refusal)
			break
		}
		deployed = append(deployed, p)
		t.Logf("deploy %s: %d bytes pushed, %d MiB free", p.name, rec.BytesPushed, free>>20)
	}
	if refusal == "" || len(deployed) == 0 {
		t.Fatalf("deployed %d packages, refusal %q: want some deployed, then one refused", len(deployed), refusal)
	}
	// -o json: progress events on stderr, one JSON object a line, then
	// the error's one line.
	lines := strings.Split(strings.TrimSpace(refusal), "\n")
	stderr := strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(stderr, "ferry: ") || !strings.Contains(stderr, "registry storage full: ") || !strings.Contains(stderr, " free of ") {
		t.Fatalf("refusal %q: want one line naming the registry's free space", stderr)
	}
	t.Logf("COUNT the refusal, one line: %s", stderr[strings.Index(stderr, "registry storage full"):])

	// Pulls go on: a Pod on every node pulls the first package's image.
	ns := c.Namespace(t)
	pulled := 0
	for _, node := range nodes {
		name := "full-pull-" + node
		pod := tinyPod(name, deployed[0].image, corev1.PullAlways)
		pod.Spec.NodeName = node
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := harness.WaitPodRunning(pctx, c.Client, ns, name)
		cancel()
		if err != nil {
			t.Fatalf("pull on %s with the registry full: %v", node, err)
		}
		pulled++
	}
	t.Logf("pulls with the registry full: %d of %d nodes", pulled, len(nodes))

	// Remove one package: its garbage collection frees its layer.
	var rm struct {
		Storage struct {
			Before int64 `json:"before"`
			After  int64 `json:"after"`
		} `json:"storage"`
	}
	_, freeBefore, _ := usage()
	if err := ferryJSON(ctx, t, c, &rm, "remove", deployed[len(deployed)-1].name); err != nil {
		t.Fatal(err)
	}
	_, freeAfter, _ := usage()
	t.Logf("remove %s: storage %d → %d bytes (GC's count); volume free %d → %d MiB", deployed[len(deployed)-1].name, rm.Storage.Before, rm.Storage.After, freeBefore>>20, freeAfter>>20)
	if freeAfter-freeBefore < 10<<20 {
		t.Fatalf("remove freed %d bytes of the volume, want the 12 MiB layer", freeAfter-freeBefore)
	}

	// The refused package now fits.
	var rec struct {
		BytesPushed int64 `json:"bytesPushed"`
	}
	if err := ferryJSON(ctx, t, c, &rec, "deploy", refused.path, "--key", refused.pub); err != nil {
		t.Fatalf("deploy after the removal: %v", err)
	}
	_, free, _ = usage()
	t.Logf("deploy %s after the removal: %d bytes pushed, %d MiB free", refused.name, rec.BytesPushed, free>>20)
}

// bigPackage creates a signed package named name with one image,
// docker.io/library/<name>:1.0, whose layer holds n random bytes, and
// returns it with the path of its public key and the image's reference.
func bigPackage(ctx context.Context, t *testing.T, c *harness.Cluster, name string, n int) (p struct{ name, path, pub, image string }) {
	t.Helper()
	dir := t.TempDir()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	layoutImage(ctx, t, dir, c.Tiny(t), mkimg.Options{Files: map[string][]byte{"/random.bin": data}, Labels: map[string]string{"e2e": name}})
	image := "docker.io/library/" + name + ":1.0"
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\nplatforms: [linux/%s]\ncomponents:\n  - name: app\n    images:\n      - {ref: %s, layout: images}\n", name, runtime.GOARCH, image)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), name+".tar.zst")
	if _, err := build.Create(ctx, d, build.CreateOptions{Charts: chart.Packager{}, Output: out, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	p.name, p.path, p.pub, p.image = name, keep(t, out), keep(t, pub.Name), image
	return p
}
