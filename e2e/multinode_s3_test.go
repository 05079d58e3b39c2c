package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// objectStore starts the cluster's object store (MinIO on node1's address,
// which the nodes reach and the workstation does not; one per cluster, its
// root credentials fixed) with a new bucket, and creates ferry's namespace
// and the Secret "object-store" init reads the credentials from.
func objectStore(ctx context.Context, t *testing.T, c *harness.Cluster) s3Store {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := fmt.Sprintf("%x", b)
	user, pass, bucket := "ferry-e2e", "ferry-e2e-object-store", "ferry-registry-"+suffix
	script := exec.CommandContext(ctx, "bash", filepath.Join("cluster", "nodes.sh"), "minio", peertool.Require(t, "minio"), bucket)
	script.Env = append(os.Environ(), "MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+pass)
	out, err := script.Output()
	if err != nil {
		t.Fatalf("nodes.sh minio: %v: %s", err, exitStderr(err))
	}
	ns := cluster.DefaultNamespace
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "object-store", Namespace: ns}, Data: map[string][]byte{
		cluster.AccessKeyIDKey: []byte(user), cluster.SecretAccessKeyKey: []byte(pass),
	}}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return s3Store{
		URL:    "s3://" + bucket + "/ferry?endpoint=http://10.200.0.1:9000&path-style=true",
		Bucket: bucket, Suffix: suffix, Data: strings.TrimSpace(string(out)),
	}
}

// s3Store is a bucket of the cluster's object store.
type s3Store struct {
	URL    string // init's --storage
	Bucket string
	Suffix string // the bucket's random part
	Data   string // MinIO's data folder (every bucket)
}

// TestMultiNodeS3 runs the in-cluster registry highly available: moved with
// its content (--migrate) from one node's filesystem to two replicas on two
// nodes over the cluster's object store (MinIO on node1's address, which the
// nodes reach and the workstation does not). While Pods
// on every node keep pulling, one registry Pod is deleted, then the kubelet
// of the node of another one stops: every pull succeeds, and a redeploy
// finds every blob still there. A deploy while a replica restarts succeeds;
// a remove garbage-collects the bucket (read-only maintenance: the other
// package still pulls meanwhile and after).
func TestMultiNodeS3(t *testing.T) {
	c := harness.Workstation(t)
	ctx := timeout(t, 15*time.Minute)
	nodes := readyNodes(ctx, t, c)

	resetFerry(ctx, t, c)
	store := objectStore(ctx, t, c)
	storage, suffix, bucket, data := store.URL, store.Suffix, store.Bucket, store.Data
	ns := cluster.DefaultNamespace

	pkg, pub := appPackage(ctx, t, c, "e2e-s3")
	pkg, pubName := keep(t, pkg), keep(t, pub.Name)
	ok := t.Run("init: from one node's filesystem to two replicas on the object store, with --migrate", func(t *testing.T) {
		// A storage folder of its own: the nodes share the host's file
		// system, and the default folder holds what every e2e run stored.
		dir := filepath.Join(os.TempDir(), "ferry-e2e-s3-"+suffix)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		var plain struct{}
		if err := ferryJSON(ctx, t, c, &plain, "init", "--bin-dir", binDir(t), "--storage-dir", dir); err != nil {
			t.Fatal(err)
		}
		var rec struct{}
		if err := ferryJSON(ctx, t, c, &rec, "deploy", pkg, "--key", pubName); err != nil {
			t.Fatal(err)
		}
		var bad struct{}
		err := ferryJSON(ctx, t, c, &bad, "init", "--bin-dir", binDir(t), "--storage", storage, "--storage-credentials", "missing")
		if err == nil || !strings.Contains(err.Error(), "Secret missing not found") {
			t.Fatalf("init with a missing Secret: %v", err)
		}
		err = ferryJSON(ctx, t, c, &bad, "init", "--bin-dir", binDir(t), "--storage", storage, "--storage-credentials", "object-store")
		if err == nil || !strings.Contains(err.Error(), "would strand them (pass --migrate") {
			t.Fatalf("init switching storage under a deployed package: %v", err)
		}
		var res struct {
			Storage  string  `json:"storage"`
			Replicas int32   `json:"replicas"`
			Seconds  float64 `json:"seconds"`
		}
		if err := ferryJSON(ctx, t, c, &res, "init", "--bin-dir", binDir(t), "--storage", storage, "--storage-credentials", "object-store", "--migrate"); err != nil {
			t.Fatal(err)
		}
		if res.Replicas != 2 || !strings.HasPrefix(res.Storage, "s3://"+bucket+"/ferry?") {
			t.Fatalf("init: %+v", res)
		}
		start := time.Now()
		for {
			pods := readyPods(registryPods(ctx, t, c))
			if len(pods) == 2 && pods[0].Spec.NodeName != pods[1].Spec.NodeName && inject.DeploymentStorage(registryDeployment(ctx, t, c)) != "" {
				t.Logf("TIMING init moving the registry onto S3 with --migrate: %.1fs; registry pods %v", res.Seconds, podNodes(pods))
				break
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("registry pods: %v", podNodes(registryPods(ctx, t, c)))
			}
			time.Sleep(time.Second)
		}
		if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{}); err != nil {
			t.Fatalf("PodDisruptionBudget: %v", err)
		}
		// The migrated registry has every blob: a redeploy pushes nothing.
		if n := deployPushed(ctx, t, c, pkg, pubName); n != 0 {
			t.Fatalf("redeploy after the migration pushed %d bytes", n)
		}
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("pulls go on through a deleted registry Pod and a node going down", func(t *testing.T) {
		pullNS := c.Namespace(t)
		nodeDown, stopPulls := pullLoop(ctx, t, c, pullNS, nodes)
		time.Sleep(5 * time.Second)
		pods := registryPods(ctx, t, c)
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Logf("deleted registry pod %s on %s", pods[0].Name, pods[0].Spec.NodeName)
		time.Sleep(15 * time.Second)
		// The kubelet of a worker with a registry replica (node1 holds the
		// API server and the object store).
		var down string
		for _, p := range registryPods(ctx, t, c) {
			if p.Spec.NodeName != "node1" {
				down = p.Spec.NodeName
			}
		}
		if down == "" {
			t.Fatalf("no registry replica on a worker: %v", podNodes(registryPods(ctx, t, c)))
		}
		nodeDown(down)
		if _, err := harness.Script(ctx, "nodes.sh", "stop-kubelet", down); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := harness.Script(context.Background(), "nodes.sh", "start-kubelet", down); err != nil {
				t.Errorf("start %s's kubelet again: %v", down, err)
			}
		})
		t.Logf("stopped the kubelet of %s", down)
		time.Sleep(40 * time.Second) // NotReady after 20 s, then the replica moves
		res := stopPulls()
		t.Logf("pulls: %d succeeded, %d failed (%s)", res.ok, len(res.failed), strings.Join(res.failed, "; "))
		if len(res.failed) > 0 || res.ok == 0 {
			t.Fatalf("%d pulls failed", len(res.failed))
		}
		// Nothing lost: a redeploy finds every blob of the package there.
		if n := deployPushed(ctx, t, c, pkg, pubName); n != 0 {
			t.Fatalf("redeploy pushed %d bytes: something was lost", n)
		}
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("deploy while a replica restarts", func(t *testing.T) {
		// An image of its own (another file name: another layer), which
		// the garbage collection frees when the package goes.
		other, otherPub := appPackageWith(ctx, t, c, "e2e-s3-other", mkimg.Options{Path: "tiny-other", Labels: map[string]string{"e2e": "s3-other"}})
		// Both replicas back (the stopped kubelet runs again).
		start := time.Now()
		for len(readyPods(registryPods(ctx, t, c))) < 2 {
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("registry replicas not both ready again after 3 min: %v", podNodes(registryPods(ctx, t, c)))
			}
			time.Sleep(time.Second)
		}
		t.Logf("TIMING both registry replicas ready again %.1fs after the subtest started", time.Since(start).Seconds())
		pods := registryPods(ctx, t, c)
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deployPushed(ctx, t, c, other, otherPub.Name)
	})
	if !ok {
		t.FailNow()
	}

	ok = t.Run("drain a registry replica's node while Pods start elsewhere", func(t *testing.T) {
		start := time.Now()
		for len(readyPods(registryPods(ctx, t, c))) < 2 {
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("registry replicas not both ready after 3 min: %v", podNodes(registryPods(ctx, t, c)))
			}
			time.Sleep(time.Second)
		}
		drainUnderLoad(ctx, t, c, "docker.io/library/app:1.0", "S3")
	})
	if !ok {
		t.FailNow()
	}

	t.Run("remove garbage-collects the bucket; the other package still pulls", func(t *testing.T) {
		before := dirSize(t, data)
		var res struct {
			Images  []string `json:"images"`
			Storage struct {
				Before int64 `json:"before"`
				After  int64 `json:"after"`
			} `json:"storage"`
		}
		if err := ferryJSON(ctx, t, c, &res, "remove", "e2e-s3-other"); err != nil {
			t.Fatal(err)
		}
		after := dirSize(t, data)
		t.Logf("remove: the bucket's registry %d → %d bytes (GC's count); MinIO's data folder (every bucket, its own metadata) %d → %d bytes", res.Storage.Before, res.Storage.After, before, after)
		// MinIO's folder is information only: it holds every bucket and
		// purges deleted objects in the background.
		if freed := res.Storage.Before - res.Storage.After; freed < 512<<10 {
			t.Fatalf("the bucket did not shrink by the removed package's image layer: %+v", res.Storage)
		}
		var up []string
		for _, n := range nodes {
			if node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err == nil && nodeIsReady(node) {
				up = append(up, n)
			}
		}
		_, stop := pullLoop(ctx, t, c, c.Namespace(t), up)
		time.Sleep(10 * time.Second)
		if r := stop(); len(r.failed) > 0 || r.ok == 0 {
			t.Fatalf("pulls after remove: %d ok, failed: %v", r.ok, r.failed)
		}
	})
}

func registryDeployment(ctx context.Context, t *testing.T, c *harness.Cluster) *appsv1.Deployment {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments(cluster.DefaultNamespace).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// registryPods are the registry's running Pods, not being deleted.
func registryPods(ctx context.Context, t *testing.T, c *harness.Cluster) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(cluster.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(cluster.RegistryLabels()).String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

func readyPods(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if podReady(&p) {
			out = append(out, p)
		}
	}
	return out
}

func podNodes(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"@"+p.Spec.NodeName)
	}
	return out
}

type pullResult struct {
	ok     int
	failed []string
}

// pullLoop starts Pods of docker.io/library/app:1.0 (the agent rewrites it
// to the registry by digest) with imagePullPolicy Always, one after the
// other on each node, each asking the registry for the image anew. down
// says a node's kubelet stopped (its Pods can not run: not counted); stop
// lets the Pods in flight finish and tells how many pulled and started, and
// which did not within 2 minutes.
func pullLoop(ctx context.Context, t *testing.T, c *harness.Cluster, ns string, nodes []string) (down func(node string), stop func() pullResult) {
	t.Helper()
	var (
		mu      sync.Mutex
		res     pullResult
		wg      sync.WaitGroup
		stopped = map[string]context.CancelFunc{}
	)
	lctx, cancel := context.WithCancel(ctx)
	for _, node := range nodes {
		nctx, ncancel := context.WithCancel(ctx)
		stopped[node] = ncancel
		wg.Go(func() {
			for i := 0; lctx.Err() == nil && nctx.Err() == nil; i++ {
				name := fmt.Sprintf("pull-%s-%d", node, i)
				pod := tinyPod(name, "docker.io/library/app:1.0", corev1.PullAlways)
				pod.Spec.NodeName = node
				if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					res.failed = append(res.failed, name+": "+err.Error())
					mu.Unlock()
					return
				}
				pctx, pcancel := context.WithTimeout(nctx, 2*time.Minute)
				_, err := harness.WaitPodRunning(pctx, c.Client, ns, name)
				pcancel()
				_ = c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
				mu.Lock()
				switch {
				case err == nil:
					res.ok++
				case nctx.Err() != nil:
					// Its kubelet stopped: the Pod never ran there.
				default:
					res.failed = append(res.failed, name+": "+err.Error())
				}
				mu.Unlock()
			}
		})
	}
	down = func(node string) { stopped[node]() }
	stop = func() pullResult {
		cancel()
		wg.Wait()
		for _, c := range stopped {
			c()
		}
		mu.Lock()
		defer mu.Unlock()
		return res
	}
	return down, stop
}

// dirSize sums the sizes of the files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// deployPushed runs ferry deploy of pkg (signed by the key pub) and returns
// the bytes it pushed.
func deployPushed(ctx context.Context, t *testing.T, c *harness.Cluster, pkg, pub string) int64 {
	t.Helper()
	var rec struct {
		BytesPushed int64 `json:"bytesPushed"`
	}
	if err := ferryJSON(ctx, t, c, &rec, "deploy", pkg, "--key", pub); err != nil {
		t.Fatal(err)
	}
	return rec.BytesPushed
}
