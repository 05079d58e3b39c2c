package inject

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/inject/loader"
)

// TestAgentCertificates: new certificates serve the agent's Service names
// from their CA; init keeps them while good for a year, and replaces them
// for another namespace, near their end, or when damaged.
func TestAgentCertificates(t *testing.T) {
	now := time.Now()
	data, renewed, err := agentCertificates(nil, "ferry", now)
	if err != nil || !renewed {
		t.Fatalf("generate: %v, renewed %v", err, renewed)
	}
	if !certificatesGood(data, "ferry", now) {
		t.Fatal("new certificates are not good")
	}
	for _, key := range []string{"ca.crt", corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(data[key]) == 0 {
			t.Fatalf("no %s", key)
		}
	}
	if kept, renewed, _ := agentCertificates(data, "ferry", now); renewed || !bytes.Equal(kept[corev1.TLSCertKey], data[corev1.TLSCertKey]) {
		t.Fatal("good certificates were replaced")
	}
	damaged := map[string][]byte{"ca.crt": data["ca.crt"], corev1.TLSCertKey: data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: []byte("no key")}
	other, _, _ := agentCertificates(nil, "other", now)
	for name, c := range map[string]struct {
		have map[string][]byte
		ns   string
		now  time.Time
	}{
		"other namespace": {data, "elsewhere", now},
		"within a year":   {data, "ferry", now.Add(agentValidity - agentRenewBefore + time.Hour)},
		"damaged key":     {damaged, "ferry", now},
		"other CA":        {map[string][]byte{"ca.crt": other["ca.crt"], corev1.TLSCertKey: data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: data[corev1.TLSPrivateKeyKey]}, "ferry", now},
	} {
		t.Run(name, func(t *testing.T) {
			got, renewed, err := agentCertificates(c.have, c.ns, c.now)
			if err != nil || !renewed || !certificatesGood(got, c.ns, c.now) {
				t.Fatalf("renewed %v, good %v, %v", renewed, certificatesGood(got, c.ns, c.now), err)
			}
		})
	}
}

// TestAgentBinary: the ferry given (or BinDir/ferry) when it is a
// static executable for the node, else BinDir/ferry-linux-<arch>; an error
// naming both otherwise.
func TestAgentBinary(t *testing.T) {
	amd64, err := loader.ELF("amd64") // small static executables
	if err != nil {
		t.Fatal(err)
	}
	arm64, err := loader.ELF("arm64")
	if err != nil {
		t.Fatal(err)
	}
	// The same with its second program header made a PT_INTERP.
	dynamic := bytes.Clone(amd64)
	phoff := binary.LittleEndian.Uint64(dynamic[0x20:])
	binary.LittleEndian.PutUint32(dynamic[phoff+56:], 3)

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	self := write("ferry", amd64)
	write(AgentFileName("arm64"), arm64)
	dyn := write("ferry-dynamic", dynamic)

	if p, err := AgentBinary("", dir, "amd64"); err != nil || p != self {
		t.Fatalf("amd64 node: %s, %v", p, err)
	}
	if p, err := AgentBinary(self, dir, "arm64"); err != nil || p != filepath.Join(dir, "ferry-linux-arm64") {
		t.Fatalf("arm64 node: %s, %v", p, err)
	}
	_, err = AgentBinary(dyn, dir, "amd64")
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "ferry-linux-amd64") {
		t.Fatalf("dynamic binary, no ferry-linux-amd64: %v", err)
	}
	if _, err := AgentBinary(filepath.Join(dir, "absent"), t.TempDir(), "arm64"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("nothing there: %v", err)
	}
}

// TestPushImageUncompressed: an uncompressed layer is the tar itself (its
// digest is its diff ID), the same from a file as from memory, and a second
// push sends nothing.
func TestPushImageUncompressed(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{Store: memory.New()}
	bin := bytes.Repeat([]byte("ferry"), 1000)
	file := filepath.Join(t.TempDir(), "ferry")
	if err := os.WriteFile(file, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	desc, err := PushImage(ctx, store, ImageOptions{Arch: "amd64", BinaryFile: file, Path: AgentBinaryPath, Uncompressed: true})
	if err != nil {
		t.Fatal(err)
	}
	if store.pushes != 3 {
		t.Fatalf("%d pushes, want 3", store.pushes)
	}
	m := fetchJSON[ocispec.Manifest](t, store, desc)
	cfg := fetchJSON[ocispec.Image](t, store, m.Config)
	if m.Layers[0].MediaType != ocispec.MediaTypeImageLayer || m.Layers[0].Digest != cfg.RootFS.DiffIDs[0] || cfg.Config.Entrypoint[0] != AgentBinaryPath {
		t.Fatalf("layer %+v, config %+v", m.Layers[0], cfg)
	}
	again, err := PushImage(ctx, store, ImageOptions{Arch: "amd64", Binary: bin, Path: AgentBinaryPath, Uncompressed: true})
	if err != nil || again.Digest != desc.Digest || store.pushes != 3 {
		t.Fatalf("second push, from memory: %s (%v), %d pushes", again.Digest, err, store.pushes)
	}
}

// TestTarLayer: the layer written from its parts is what archive/tar writes.
func TestTarLayer(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 5000} {
		bin := bytes.Repeat([]byte{7}, n)
		var want bytes.Buffer
		tw := tar.NewWriter(&want)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "ferry", Mode: 0o555, Size: int64(n), ModTime: time.Unix(0, 0), Format: tar.FormatPAX})
		tw.Write(bin)
		tw.Close()
		l, err := newTarLayer(ImageOptions{Binary: bin, Path: "/ferry"})
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := l.writeTo(&got); err != nil {
			t.Fatal(err)
		}
		d, size, _ := l.digest()
		if !bytes.Equal(got.Bytes(), want.Bytes()) || d != digest.FromBytes(want.Bytes()) || size != int64(want.Len()) {
			t.Fatalf("%d bytes: the tar stream differs from archive/tar's (%d, %d bytes)", n, got.Len(), want.Len())
		}
	}
}

type countingStore struct {
	*memory.Store
	pushes int
}

func (s *countingStore) Push(ctx context.Context, d ocispec.Descriptor, r io.Reader) error {
	s.pushes++
	return s.Store.Push(ctx, d, r)
}

func fetchJSON[T any](t *testing.T, s *countingStore, d ocispec.Descriptor) T {
	t.Helper()
	var v T
	rc, err := s.Fetch(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if digest.FromBytes(b) != d.Digest {
		t.Fatal("content does not match its digest")
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAgentObjects: the Deployment runs the image by digest as non-root
// with the pull secret and readiness on /healthz; the webhook fails closed,
// leaves ferry's, the system's and ignored namespaces alone, and covers
// ephemeral containers.
func TestAgentObjects(t *testing.T) {
	in := &initRun{ns: "ferry", arch: "arm64", opts: InitOptions{AgentRequireKnown: true},
		res: &InitResult{Registry: "127.0.0.1:31999", Agent: "127.0.0.1:31999/ferry/agent@sha256:" + strings.Repeat("a", 64)}}
	d := in.agentDeployment("0123")
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != in.res.Agent || pod.ImagePullSecrets[0].Name != PullSecretName || pod.NodeSelector[corev1.LabelArchStable] != "arm64" ||
		!*pod.SecurityContext.RunAsNonRoot || c.ReadinessProbe.HTTPGet.Path != "/healthz" || !strings.Contains(strings.Join(c.Args, " "), "--require-known") {
		t.Fatalf("Deployment: %+v", pod)
	}
	if d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Fatal("a rollout may leave the webhook without a pod")
	}
}

// TestAgentWebhookConfiguration checks what agentWebhook registers.
func TestAgentWebhookConfiguration(t *testing.T) {
	w := agentWebhookConfiguration("ferry", []byte("CA"), nil)
	h := w.Webhooks[0]
	if *h.FailurePolicy != admissionregistrationv1.Fail || *h.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun ||
		string(h.ClientConfig.CABundle) != "CA" || *h.ClientConfig.Service.Path != "/mutate" || h.AdmissionReviewVersions[0] != "v1" {
		t.Fatalf("webhook: %+v", h)
	}
	if got := strings.Join(h.Rules[0].Resources, ","); got != "pods,pods/ephemeralcontainers" {
		t.Fatalf("resources %s", got)
	}
	sel := h.NamespaceSelector.MatchExpressions
	if len(sel) != 2 || strings.Join(sel[0].Values, ",") != "ferry,kube-system" || sel[1].Key != AgentIgnoreLabel || sel[1].Values[0] != AgentIgnoreValue {
		t.Fatalf("namespace selector %+v", sel)
	}
	if w.Name != "ferry-agent" || agentWebhookConfiguration("other", nil, nil).Name != "ferry-agent-other" {
		t.Fatal("cluster-wide names")
	}
}
