package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// cluster is a fake API server holding the agent's objects as init leaves
// them: the webhook configuration (two webhooks), the CA ConfigMap, and
// the Secret Ensure made.
func newCluster(t *testing.T, now time.Time, o Options) (*fake.Clientset, Target) {
	t.Helper()
	tg := AgentTarget("ferry")
	hook := admissionregistrationv1.MutatingWebhook{Name: "pods.agent.ferry.dev"}
	src := hook
	src.Name = "sources.agent.ferry.dev"
	cs := fake.NewClientset(
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: tg.Webhook}, Webhooks: []admissionregistrationv1.MutatingWebhook{hook, src}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: tg.ConfigMap, Namespace: "ferry"}},
	)
	if _, err := Ensure(context.Background(), cs, tg, o, now); err != nil {
		t.Fatal(err)
	}
	return cs, tg
}

// snapshot is what the cluster holds at one moment: the webhook's bundle
// and the Secret's certificate.
type snapshot struct {
	at     time.Time
	bundle []byte
	cert   []byte
}

func take(t *testing.T, cs *fake.Clientset, tg Target, at time.Time) snapshot {
	t.Helper()
	ctx := context.Background()
	w, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, tg.Webhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range w.Webhooks[1:] {
		if !bytes.Equal(h.ClientConfig.CABundle, w.Webhooks[0].ClientConfig.CABundle) {
			t.Fatalf("%s: the webhooks' caBundles differ", at)
		}
	}
	cm, err := cs.CoreV1().ConfigMaps("ferry").Get(ctx, tg.ConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[caKey] != string(w.Webhooks[0].ClientConfig.CABundle) {
		t.Fatalf("%s: the ConfigMap's bundle is not the webhook's", at)
	}
	s, err := cs.CoreV1().Secrets("ferry").Get(ctx, tg.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{at: at, bundle: w.Webhooks[0].ClientConfig.CABundle, cert: s.Data[corev1.TLSCertKey]}
}

// asOf is the last snapshot taken at or before at.
func asOf(h []snapshot, at time.Time) snapshot {
	last := h[0]
	for _, s := range h {
		if s.at.After(at) {
			break
		}
		last = s
	}
	return last
}

func leafOf(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRotationNeverFailsAdmission runs the Rotator on an injected clock
// through several rotations of 10-minute certificates, second by second,
// with an API server that sees the webhook's bundle 8 s late (under
// Propagation) and two agents, one serving the Secret's certificate at
// once, one 20 s late (Presented reports what they serve): at every second
// the certificate each agent serves verifies against the bundle the API
// server holds. Each rotation writes in order: the new CA added, then the
// Secret, then the old CA trimmed.
func TestRotationNeverFailsAdmission(t *testing.T) {
	o := Options{Validity: 10 * time.Minute, RenewBefore: 4 * time.Minute, Propagation: 10 * time.Second, Settle: 30 * time.Second, Check: time.Minute}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	cs, tg := newCluster(t, now, o)
	// Two agents: one reloads at once, one 20 s late.
	const apiLag = 8 * time.Second
	agentLags := []time.Duration{0, 20 * time.Second}
	history := []snapshot{take(t, cs, tg, now)}
	r := &Rotator{Client: cs, Target: tg, Options: o, Now: func() time.Time { return now },
		Presented: func(context.Context) ([]*x509.Certificate, error) {
			var certs []*x509.Certificate
			for _, lag := range agentLags {
				certs = append(certs, leafOf(t, asOf(history, now.Add(-lag)).cert))
			}
			return certs, nil
		}}
	ctx := context.Background()
	var (
		next     = now
		failures int
		did      []string
		checked  int
	)
	for now = start; now.Before(start.Add(30 * time.Minute)); now = now.Add(time.Second) {
		for i := 0; !next.After(now); i++ {
			if i > 10 {
				t.Fatalf("%s: the rotator does not settle: %v", now, did[len(did)-3:])
			}
			s, err := r.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.Did != "" {
				did = append(did, now.Sub(start).String()+" "+s.Did)
				history = append(history, take(t, cs, tg, now))
			}
			next = s.Next
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(asOf(history, now.Add(-apiLag)).bundle)
		for _, lag := range agentLags {
			agent := asOf(history, now.Add(-lag))
			if _, err := leafOf(t, agent.cert).Verify(x509.VerifyOptions{Roots: roots, DNSName: tg.DNSNames[0], CurrentTime: now}); err != nil {
				failures++
				if failures < 5 {
					t.Errorf("%s: the certificate an agent %s late serves fails the API server: %v", now.Sub(start), lag, err)
				}
			}
			checked++
		}
	}
	var rotations int
	for i, s := range history[1:] {
		prev := history[i]
		if bytes.Equal(s.cert, prev.cert) {
			continue
		}
		rotations++
		// The new certificate's CA was in the bundle Propagation before.
		before := asOf(history, s.at.Add(-o.Propagation))
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(before.bundle)
		if _, err := leafOf(t, s.cert).Verify(x509.VerifyOptions{Roots: roots, CurrentTime: s.at}); err != nil {
			t.Errorf("rotation at %s: the bundle of %s before did not trust it", s.at.Sub(start), o.Propagation)
		}
	}
	if rotations < 4 || failures != 0 {
		t.Fatalf("%d rotations, %d of %d agent-seconds failing; steps:\n%s", rotations, failures, checked, strings.Join(did, "\n"))
	}
	if n := len(parseBundle(history[len(history)-1].bundle)); n != 1 {
		t.Fatalf("the bundle ends with %d CAs", n)
	}
	t.Logf("%d rotations in 30 min of 10-min certificates, %d steps, %d agent-seconds checked, 0 failing", rotations, len(did), checked)
}

// TestTrimWaitsForServers: the old CA stays in the bundle while a server
// still presents the old certificate (or cannot be asked), whatever Settle
// says, and leaves it once every server presents the new one.
func TestTrimWaitsForServers(t *testing.T) {
	o := Options{Validity: 10 * time.Minute, RenewBefore: 4 * time.Minute, Propagation: time.Second, Settle: time.Second}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cs, tg := newCluster(t, now, o)
	old := take(t, cs, tg, now)
	presents := leafOf(t, old.cert)
	r := &Rotator{Client: cs, Target: tg, Options: o, Now: func() time.Time { return now },
		Presented: func(context.Context) ([]*x509.Certificate, error) { return []*x509.Certificate{presents}, nil }}
	ctx := context.Background()
	now = now.Add(7 * time.Minute) // due
	for range 20 {
		if _, err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2 * time.Second)
	}
	s := take(t, cs, tg, now)
	if bytes.Equal(s.cert, old.cert) || len(parseBundle(s.bundle)) != 2 {
		t.Fatalf("rotated %v, %d CAs in the bundle; want rotated, 2 while the old certificate is presented", !bytes.Equal(s.cert, old.cert), len(parseBundle(s.bundle)))
	}
	presents = leafOf(t, s.cert)
	for range 3 {
		if _, err := r.Step(ctx); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2 * time.Second)
	}
	if n := len(parseBundle(take(t, cs, tg, now).bundle)); n != 1 {
		t.Fatalf("%d CAs in the bundle once every server presents the new certificate", n)
	}
}
