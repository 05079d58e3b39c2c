package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
)

// kubeVersion is the Kubernetes version e2e/kube builds.
const kubeVersion = "v1.35.4"

func TestNodeReady(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 2*time.Minute)

	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != kubeVersion {
		t.Errorf("API server %s, want %s", v.GitVersion, kubeVersion)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	if len(nodes.Items) != 1 {
		t.Fatalf("%d nodes, want 1", len(nodes.Items))
	}
	node, err := harness.WaitNodeReady(ctx, c.Client, nodes.Items[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	info := node.Status.NodeInfo
	t.Logf("node %s Ready: kubelet %s, %s, addresses %v", node.Name, info.KubeletVersion, info.ContainerRuntimeVersion, node.Status.Addresses)
	if info.KubeletVersion != kubeVersion {
		t.Errorf("kubelet %s, want %s", info.KubeletVersion, kubeVersion)
	}
}

// TestImportedImage runs a pod from the image up.sh imported into containerd
// (no registry involved) and waits for its HTTP readiness probe.
func TestImportedImage(t *testing.T) {
	t.Parallel()
	c := harness.Get(t)
	ctx := timeout(t, 2*time.Minute)
	ns := c.Namespace(t)

	pod := tinyPod("tiny", c.Image, corev1.PullNever)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p, err := harness.WaitPodReady(ctx, c.Client, ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s/%s Ready on %s, image %s", ns, p.Name, p.Status.PodIP, p.Status.ContainerStatuses[0].ImageID)
}

// TestImportImage imports a freshly built image archive into the node's
// containerd (harness.ImportImage, as tests of image loading will) and runs
// a pod from it without any registry.
func TestImportImage(t *testing.T) {
	t.Parallel()
	c := harness.Get(t)
	ctx := timeout(t, 2*time.Minute)
	ns := c.Namespace(t)

	img, err := mkimg.New(c.Tiny(t), mkimg.Options{Labels: map[string]string{"dev.ferry.e2e.namespace": ns}})
	if err != nil {
		t.Fatal(err)
	}
	name := "ferry.local/imported:" + ns
	archive := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := img.WriteArchive(f, name); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	pod := tinyPod("imported", name, corev1.PullNever)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p, err := harness.WaitPodReady(ctx, c.Client, ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	// An imported image has no repository digest: CRI reports its config.
	id := p.Status.ContainerStatuses[0].ImageID
	if !strings.HasSuffix(id, img.Manifest.Digest.String()) && !strings.HasSuffix(id, img.Config.Digest.String()) {
		t.Errorf("container runs image %s, want manifest %s or config %s", id, img.Manifest.Digest, img.Config.Digest)
	}
}

// TestNodePort reaches a pod through a NodePort Service on the node's
// 127.0.0.1 and through its ClusterIP.
func TestNodePort(t *testing.T) {
	t.Parallel()
	c := harness.Get(t)
	ctx := timeout(t, 3*time.Minute)
	ns := c.Namespace(t)

	pod := tinyPod("hello", c.Image, corev1.PullNever)
	pod.Labels = map[string]string{"app": "hello"}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: pod.Labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	if _, err := harness.WaitPodReady(ctx, c.Client, ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	want := "hello from hello\n"
	for _, url := range []string{
		fmt.Sprintf("http://127.0.0.1:%d/", svc.Spec.Ports[0].NodePort),
		fmt.Sprintf("http://%s:80/", svc.Spec.ClusterIP),
	} {
		start := time.Now()
		body, err := harness.WaitHTTP(ctx, url)
		if err != nil {
			t.Fatalf("service %s/hello: %v", ns, err)
		}
		if body != want {
			t.Errorf("GET %s: %q, want %q", url, body, want)
		}
		t.Logf("GET %s answered after %s", url, time.Since(start).Round(100*time.Millisecond))
	}
}

// TestPullFromLoopbackRegistry pushes a fresh image (its digest is new on
// every run) to ferry's registry on the node's 127.0.0.1 and runs a pod that
// containerd pulls it for, over plain HTTP.
func TestPullFromLoopbackRegistry(t *testing.T) {
	t.Parallel()
	c := harness.Get(t)
	ctx := timeout(t, 2*time.Minute)
	ns := c.Namespace(t)

	reg := c.StartRegistry(t)
	img, err := mkimg.New(c.Tiny(t), mkimg.Options{Labels: map[string]string{"dev.ferry.e2e.namespace": ns}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := reg.Push(ctx, "e2e/tiny", img)
	if err != nil {
		t.Fatal(err)
	}
	pod := tinyPod("pulled", ref, corev1.PullAlways)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p, err := harness.WaitPodReady(ctx, c.Client, ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if id := p.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, "@"+img.Manifest.Digest.String()) {
		t.Errorf("container runs image %s, want %s", id, ref)
	}
	for _, path := range []string{
		"/v2/e2e/tiny/manifests/" + img.Manifest.Digest.String(),
		"/v2/e2e/tiny/blobs/" + img.Config.Digest.String(),
	} {
		if !reg.Served("GET", path) {
			t.Errorf("registry never served GET %s; requests: %v", path, reg.Requests())
		}
	}
	t.Logf("pod %s/%s pulled %s", ns, p.Name, ref)
}

// tinyPod is a pod running `tiny serve :8080` from image, with an HTTP
// readiness probe.
func tinyPod(name, image string, pull corev1.PullPolicy) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "tiny",
				Image:           image,
				ImagePullPolicy: pull,
				Args:            []string{"serve", ":8080"},
				Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// timeout is a context for t ending after d.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
