package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestCertificateRotation: with certificates of 3 minutes renewed 90 s
// before their end (init's hidden options, which the controller is given),
// the controller rotates the agent's certificate twice — the 10-year one
// init left, then a 3-minute one before it expires — while four loops
// create Pods through the webhook (server dry runs: the whole admission,
// nothing left behind) and a real Pod every tenth time: every creation is
// admitted (the count is logged; want 0 failures), each rotation trusts the
// new CA before the Secret changes and trims the old one after. Then, the
// controller stopped, an expired certificate is planted in the Secret: the
// agents serve it and admissions fail; `ferry init` with the default
// options repairs it (a 10-year certificate), and Pods are admitted again.
// The git server serves plain HTTP inside the cluster: it has no
// certificate to rotate.
func TestCertificateRotation(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 8*time.Minute)
	bin := binDir(t)
	ns := cluster.DefaultNamespace
	target := servingcert.AgentTarget(ns)
	start := time.Now()
	short := servingcert.Options{Validity: 3 * time.Minute, RenewBefore: 90 * time.Second}
	if _, err := initWith(ctx, c, bin, short); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING init with 3-minute certificates: %.1fs", time.Since(start).Seconds())

	apps := c.Namespace(t)
	var (
		admitted, refused atomic.Int64
		firstRefusal      atomic.Value
		load              sync.WaitGroup
		stop              = make(chan struct{})
	)
	for range 4 {
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if err := admit(ctx, c.Client, apps, i%10 == 0); err != nil {
					if ctx.Err() == nil {
						refused.Add(1)
						firstRefusal.CompareAndSwap(nil, err.Error())
					}
				} else {
					admitted.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	// Watch the Secret and the bundle until two certificates have replaced
	// the first and the bundle is down to one CA again.
	var (
		certs    [][]byte
		maxCAs   int
		rotStart = time.Now()
	)
	err := harness.PollUntil(ctx, 4*time.Minute, func() (bool, error) {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, target.Secret, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if cur := s.Data[corev1.TLSCertKey]; len(certs) == 0 || !bytes.Equal(certs[len(certs)-1], cur) {
			certs = append(certs, cur)
			t.Logf("%5.1fs certificate %d in the Secret, valid until %s", time.Since(rotStart).Seconds(), len(certs), notAfter(t, cur).Format(time.RFC3339))
		}
		w, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, target.Webhook, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		n := countCerts(w.Webhooks[0].ClientConfig.CABundle)
		if n != maxCAs && n > 1 {
			t.Logf("%5.1fs %d CAs in the webhook's caBundle", time.Since(rotStart).Seconds(), n)
		}
		maxCAs = max(maxCAs, n)
		return len(certs) >= 3 && n == 1, nil
	})
	close(stop)
	load.Wait()
	t.Logf("COUNT certificates served %d (rotations %d), most CAs in the bundle %d, in %.0fs; Pod admissions %d, failed %d", len(certs), len(certs)-1, maxCAs, time.Since(rotStart).Seconds(), admitted.Load(), refused.Load())
	if err != nil {
		t.Fatalf("two rotations: %v", err)
	}
	if refused.Load() != 0 || admitted.Load() == 0 {
		t.Fatalf("%d admissions failed during rotations (first: %v), %d admitted", refused.Load(), firstRefusal.Load(), admitted.Load())
	}
	if maxCAs != 2 {
		t.Fatalf("the bundle held at most %d CAs; want 2 during each rotation", maxCAs)
	}

	// An expired certificate, with no controller to replace it.
	ctl := c.Client.AppsV1().Deployments(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := ctl.Get(ctx, cluster.ControllerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = new(int32)
		_, err = ctl.Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := harness.PollUntil(ctx, 90*time.Second, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{cluster.LabelName: cluster.ControllerName}.String()})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the controller does not stop: %v", err)
	}
	expired, err := servingcert.Issue(target.DNSNames, time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secrets := c.Client.CoreV1().Secrets(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := secrets.Get(ctx, target.Secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data = expired.Data()
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The API server keeps its TLS connections to the agents open (a
	// certificate is presented once, at the handshake): new agent Pods,
	// which load the Secret as they start, take new connections — as
	// after a cluster was stopped past its certificate's end.
	if err := c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: agentSelector()}); err != nil {
		t.Fatal(err)
	}
	var broken error
	if err := harness.PollUntil(ctx, 90*time.Second, func() (bool, error) {
		broken = admit(ctx, c.Client, apps, false)
		return broken != nil, nil
	}); err != nil {
		t.Fatalf("the agents still admit Pods with an expired certificate in their Secret: %v", err)
	}
	t.Logf("with the expired certificate: %s", oneLineErr(broken))

	start = time.Now()
	installed, err := initWith(ctx, c, bin, servingcert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING init repairing the expired certificate: %.1fs (%s)", time.Since(start).Seconds(), installed.Replaced)
	if !strings.Contains(installed.Replaced, "expired") {
		t.Fatalf("init says the certificate was %q; want replaced as expired", installed.Replaced)
	}
	if err := admit(ctx, c.Client, apps, true); err != nil {
		t.Fatalf("after init: %v", err)
	}
	s, err := secrets.Get(ctx, target.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(notAfter(t, s.Data[corev1.TLSCertKey])); left < 9*365*24*time.Hour {
		t.Fatalf("after init the certificate is valid for %s; want the default 10 years", left)
	}
	d, err := ctl.Get(ctx, cluster.ControllerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := d.Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cert-") }) || *d.Spec.Replicas != 1 {
		t.Fatalf("after init the controller runs %d replicas with %v; want 1 with the default certificates", *d.Spec.Replicas, args)
	}
}

// initWith runs init as initFerry does, with the agent's certificates'
// options.
func initWith(ctx context.Context, c *harness.Cluster, bin string, certs servingcert.Options) (*install.InstallResult, error) {
	kube := genericclioptions.NewConfigFlags(true)
	kube.KubeConfig = &c.Kubeconfig
	in := &install.Init{Client: c.Client, Config: c.Config, Kube: kube, Registry: inject.InitOptions{BinDir: bin},
		Agent: install.InstallOptions{ControllerResync: 20 * time.Second, ControllerDriftCheck: 20 * time.Second, Certificates: certs}}
	res, err := in.Run(ctx)
	if err != nil {
		return nil, err
	}
	return res.Installed, nil
}

// admit creates a Pod in ns through the admission webhooks: a server dry
// run, or a real Pod (deleted at once) when real.
func admit(ctx context.Context, cs kubernetes.Interface, ns string, real bool) error {
	p := tinyPod("", "docker.io/library/unknown:1.0", corev1.PullIfNotPresent)
	p.GenerateName = "admit-"
	opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if real {
		opts.DryRun = nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	got, err := cs.CoreV1().Pods(ns).Create(ctx, p, opts)
	if err == nil && real {
		grace := int64(0)
		_ = cs.CoreV1().Pods(ns).Delete(ctx, got.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	return err
}

func notAfter(t *testing.T, p []byte) time.Time {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("the Secret's tls.crt is not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NotAfter
}

func countCerts(bundle []byte) int {
	n := 0
	for {
		var b *pem.Block
		if b, bundle = pem.Decode(bundle); b == nil {
			return n
		}
		n++
	}
}

func oneLineErr(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
