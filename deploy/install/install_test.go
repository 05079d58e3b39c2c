package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/member"
	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/inject/loader"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestFindBinary: the ferry given (or BinDir/ferry-full, else BinDir/ferry)
// when it is a static executable for the node, else
// BinDir/ferry-linux-<arch>; an error naming both otherwise.
func TestFindBinary(t *testing.T) {
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
	write(BinaryFileName("arm64"), arm64)
	dyn := write("ferry-dynamic", dynamic)

	if p, err := FindBinary("", dir, "amd64"); err != nil || p != self {
		t.Fatalf("amd64 node: %s, %v", p, err)
	}
	if p, err := FindBinary(self, dir, "arm64"); err != nil || p != filepath.Join(dir, "ferry-linux-arm64") {
		t.Fatalf("arm64 node: %s, %v", p, err)
	}
	// Beside the front binary (bin/ferry), the full one is the agent's.
	full := write(FullBinaryName, amd64)
	if p, err := FindBinary("", dir, "amd64"); err != nil || p != full {
		t.Fatalf("amd64 node, ferry-full beside ferry: %s, %v", p, err)
	}
	_, err = FindBinary(dyn, dir, "amd64")
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "ferry-linux-amd64") {
		t.Fatalf("dynamic binary, no ferry-linux-amd64: %v", err)
	}
	if _, err := FindBinary(filepath.Join(dir, "absent"), t.TempDir(), "arm64"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("nothing there: %v", err)
	}
}

// TestAgentObjects: the Deployment runs the image by digest as non-root
// with the pull secret and readiness on /healthz; the webhook fails closed,
// leaves ferry's, the system's and ignored namespaces alone, and covers
// ephemeral containers.
func TestAgentObjects(t *testing.T) {
	in := &installer{ns: "ferry", arch: "arm64", opts: InstallOptions{RequireKnown: true},
		registry: "127.0.0.1:31999", image: "127.0.0.1:31999/ferry/agent@sha256:" + strings.Repeat("a", 64)}
	d := in.deployment("0123")
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != in.image || pod.ImagePullSecrets[0].Name != cluster.PullSecretName || pod.NodeSelector[corev1.LabelArchStable] != "arm64" ||
		!*pod.SecurityContext.RunAsNonRoot || c.ReadinessProbe.HTTPGet.Path != "/healthz" || !strings.Contains(strings.Join(c.Args, " "), "--require-known") {
		t.Fatalf("Deployment: %+v", pod)
	}
	if h := c.Lifecycle.PostStart.Exec.Command; strings.Join(h[:2], " ") != BinaryPath+" agent-probe" {
		t.Fatalf("postStart hook %q: it must wait for the agent before the kubelet's first probe", h)
	}
	if d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Fatal("a rollout may leave the webhook without a pod")
	}
}

// TestAgentWebhookConfiguration checks what Install registers.
func TestAgentWebhookConfiguration(t *testing.T) {
	w := webhookConfiguration("ferry", []byte("CA"), nil)
	h := w.Webhooks[0]
	if *h.FailurePolicy != admissionregistrationv1.Fail || *h.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun ||
		string(h.ClientConfig.CABundle) != "CA" || *h.ClientConfig.Service.Path != "/mutate" || h.AdmissionReviewVersions[0] != "v1" {
		t.Fatalf("webhook: %+v", h)
	}
	if got := strings.Join(h.Rules[0].Resources, ","); got != "pods,pods/ephemeralcontainers" {
		t.Fatalf("resources %s", got)
	}
	if got := strings.Join(w.Webhooks[1].Rules[0].Resources, ","); got != "gitrepositories,ocirepositories,helmrepositories" {
		t.Fatalf("Flux resources %s", got)
	}
	if r := w.Webhooks[1].Rules[1]; r.APIGroups[0] != "argoproj.io" || strings.Join(r.Resources, ",") != "applications,applicationsets,appprojects" {
		t.Fatalf("Argo CD rule %+v", r.Rule)
	}
	sel := h.NamespaceSelector.MatchExpressions
	if len(sel) != 2 || strings.Join(sel[0].Values, ",") != "ferry,kube-system" || sel[1].Key != IgnoreLabel || sel[1].Values[0] != IgnoreValue {
		t.Fatalf("namespace selector %+v", sel)
	}
	if w.Name != "ferry-agent" || webhookConfiguration("other", nil, nil).Name != "ferry-agent-other" {
		t.Fatal("cluster-wide names")
	}
}

// The registry Secret of rewritten Flux sources names the registry's
// Service address, where source-controller pulls from and looks up its
// credentials (the Pods' pull secret names the nodes' 127.0.0.1 NodePort).
func TestDockerConfig(t *testing.T) {
	b, err := dockerConfig("10.96.0.20:5000", cluster.Account{Username: "ferry", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	a, ok := cfg.Auths["10.96.0.20:5000"]
	if len(cfg.Auths) != 1 || !ok || a.Username != "ferry" || a.Password != "pw" || a.Auth != base64.StdEncoding.EncodeToString([]byte("ferry:pw")) {
		t.Fatalf("%s", b)
	}
}

// Prepare makes every object of the agent, the controller and the git
// server that names neither the image nor the registry, once the CRD is
// established; run again, it keeps the certificates.
func TestPrepare(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ferry", UID: "u1"}})
	ext := extfake.NewClientset()
	ext.PrependReactor("create", "customresourcedefinitions", func(a k8stesting.Action) (bool, runtime.Object, error) {
		crd := a.(k8stesting.CreateAction).GetObject().(*apiextensionsv1.CustomResourceDefinition)
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		return false, nil, nil
	})
	opts := InstallOptions{Namespace: "ferry", Extensions: ext, WaitTimeout: time.Minute}
	p, err := Prepare(ctx, cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.certs.Replaced != "missing" || len(p.certs.Cert) == 0 || len(p.certs.Bundle) == 0 {
		t.Fatalf("certificates: replaced %q, %d bytes, bundle %d bytes", p.certs.Replaced, len(p.certs.Cert), len(p.certs.Bundle))
	}
	for _, get := range []func() error{
		func() error {
			_, err := cs.CoreV1().Secrets("ferry").Get(ctx, TLSSecretName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ConfigMaps("ferry").Get(ctx, CAConfigMap, metav1.GetOptions{})
			return err
		},
		func() error { _, err := cs.CoreV1().Services("ferry").Get(ctx, Name, metav1.GetOptions{}); return err },
		func() error {
			_, err := cs.CoreV1().Services("ferry").Get(ctx, GitName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts("ferry").Get(ctx, cluster.ControllerName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, cluster.ControllerName, metav1.GetOptions{})
			return err
		},
		func() error { _, err := cs.RbacV1().ClusterRoles().Get(ctx, Name, metav1.GetOptions{}); return err },
		func() error {
			_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, v1alpha1.CRDName, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	for name, port := range map[string]string{Name: "443→https", GitName: "80→git"} {
		svc, _ := cs.CoreV1().Services("ferry").Get(ctx, name, metav1.GetOptions{})
		if p := svc.Spec.Ports; len(p) != 1 || fmt.Sprintf("%d→%s", p[0].Port, p[0].TargetPort.String()) != port || svc.Spec.Selector[cluster.LabelComponent] == "" {
			t.Fatalf("Service %s: ports %+v, selector %v; want %s", name, p, svc.Spec.Selector, port)
		}
	}
	crb, _ := cs.RbacV1().ClusterRoleBindings().Get(ctx, cluster.ControllerName, metav1.GetOptions{})
	if len(crb.OwnerReferences) != 1 || crb.OwnerReferences[0].UID != "u1" {
		t.Fatalf("the controller's binding is not owned by the namespace: %+v", crb.OwnerReferences)
	}
	if deps, _ := cs.AppsV1().Deployments("ferry").List(ctx, metav1.ListOptions{}); len(deps.Items) != 0 {
		t.Fatalf("Prepare made %d Deployments: they name the image", len(deps.Items))
	}
	again, err := Prepare(ctx, cs, opts)
	if err != nil || again.certs.Replaced != "" || !bytes.Equal(again.certs.Cert, p.certs.Cert) {
		t.Fatalf("again: replaced %q, same certificate %v, %v", again.certs.Replaced, bytes.Equal(again.certs.Cert, p.certs.Cert), err)
	}
	if _, err := Prepare(ctx, fake.NewClientset(), opts); err == nil || !strings.Contains(err.Error(), "namespace ferry") {
		t.Fatalf("no namespace: %v", err)
	}

}

// TestAgentRBAC: the agent may update, of the Secrets of ferry's
// namespace, only those it keeps (the fleet member's among them), and may
// delete Packages there (those no fleet placement wants any more) but
// nothing elsewhere.
func TestAgentRBAC(t *testing.T) {
	cs := fake.NewClientset()
	in := &installer{cs: cs, ns: "ferry"}
	if err := in.rbac(context.Background()); err != nil {
		t.Fatal(err)
	}
	role, err := cs.RbacV1().Roles("ferry").Get(context.Background(), Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var updates, packages []string
	for _, r := range role.Rules {
		switch {
		case slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, "update"):
			updates = append(updates, r.ResourceNames...)
			if len(r.ResourceNames) == 0 {
				t.Fatalf("the agent may update every Secret of ferry's namespace: %+v", r)
			}
		case slices.Contains(r.Resources, "packages"):
			packages = append(packages, r.Verbs...)
		}
	}
	if !slices.Equal(updates, []string{member.SecretName}) || !slices.Contains(packages, "delete") {
		t.Fatalf("the agent's Role: updates Secrets %v, Packages %v", updates, packages)
	}
	wide, err := cs.RbacV1().ClusterRoles().Get(context.Background(), clusterName("ferry"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range wide.Rules {
		if slices.Contains(r.Verbs, "delete") || slices.Contains(r.ResourceNames, member.SecretName) {
			t.Fatalf("the agent's ClusterRole reaches beyond ferry's namespace: %+v", r)
		}
	}
}

// TestWebhookKeepsTrust: init's write of the webhook configuration adds
// its bundle to the CAs the webhooks trust and takes none away (the
// controller may be mid-rotation, its next CA trusted and not yet served).
func TestWebhookKeepsTrust(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	var cas [][]byte
	for range 2 {
		p, err := servingcert.Issue(servingcert.AgentTarget("ferry").DNSNames, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, p.CA)
	}
	cs := fake.NewClientset(webhookConfiguration("ferry", servingcert.Union(cas[0], cas[1], now), nil))
	in := &installer{cs: cs, ns: "ferry"}
	if err := in.webhook(ctx, cas[0]); err != nil {
		t.Fatal(err)
	}
	w, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, clusterName("ferry"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range w.Webhooks {
		if got := bytes.Count(h.ClientConfig.CABundle, []byte("BEGIN CERTIFICATE")); got != 2 {
			t.Fatalf("webhook %s trusts %d CAs after init; want both", h.Name, got)
		}
	}
}
