package servingcert

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// damage is one way a cluster's certificate goes wrong.
type damage struct {
	name string
	// why is what Ensure says it replaced; empty when it keeps the
	// certificate and repairs the bundle.
	why string
	do  func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time)
}

func damages() []damage {
	secret := func(t *testing.T, cs *fake.Clientset, tg Target, f func(*corev1.Secret)) {
		t.Helper()
		ctx := context.Background()
		s, err := cs.CoreV1().Secrets(tg.Namespace).Get(ctx, tg.Secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(s)
		if _, err := cs.CoreV1().Secrets(tg.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return []damage{
		{"expired", "expired", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			p, err := Issue(tg.DNSNames, now.Add(-2*time.Hour), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			secret(t, cs, tg, func(s *corev1.Secret) { s.Data = p.Data() })
		}},
		{"garbled", "do not parse", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			secret(t, cs, tg, func(s *corev1.Secret) {
				s.Data[corev1.TLSCertKey] = []byte("-----BEGIN CERTIFICATE-----\nnot base64\n")
			})
		}},
		{"deleted", "missing", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			if err := cs.CoreV1().Secrets(tg.Namespace).Delete(context.Background(), tg.Secret, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"another namespace's", "does not verify", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			p, err := Issue(AgentTarget("elsewhere").DNSNames, now, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			secret(t, cs, tg, func(s *corev1.Secret) { s.Data = p.Data() })
		}},
		{"signed by another CA", "does not verify", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			p, err := Issue(tg.DNSNames, now, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			secret(t, cs, tg, func(s *corev1.Secret) { s.Data[caKey] = p.CA })
		}},
		{"bundle of another CA", "", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			p, err := Issue(tg.DNSNames, now, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := writeTrust(context.Background(), cs, tg, p.CA); err != nil {
				t.Fatal(err)
			}
		}},
		{"bundle garbled", "", func(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
			if err := writeTrust(context.Background(), cs, tg, []byte("junk")); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// healthy fails t unless the Secret's certificate serves the target's
// names now and every place of the bundle trusts it.
func healthy(t *testing.T, cs *fake.Clientset, tg Target, now time.Time) {
	t.Helper()
	s := take(t, cs, tg, now)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.bundle) {
		t.Fatal("the bundle holds no certificate")
	}
	if _, err := leafOf(t, s.cert).Verify(x509.VerifyOptions{Roots: roots, DNSName: tg.DNSNames[0], CurrentTime: now}); err != nil {
		t.Fatalf("the certificate does not serve: %v", err)
	}
}

// TestEnsureRepairs: ferry init repairs a certificate that is expired,
// garbled, deleted, for another namespace or from another CA (replaced),
// and a bundle that does not trust it (trusted again); a good one is kept.
func TestEnsureRepairs(t *testing.T) {
	o := Options{Propagation: time.Millisecond}
	for _, d := range damages() {
		t.Run(d.name, func(t *testing.T) {
			now := time.Now()
			cs, tg := newCluster(t, now, o)
			before := take(t, cs, tg, now)
			d.do(t, cs, tg, now)
			res, err := Ensure(context.Background(), cs, tg, o, now)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Replaced, d.why) || (d.why == "") != (res.Replaced == "") {
				t.Fatalf("replaced %q; want %q", res.Replaced, d.why)
			}
			healthy(t, cs, tg, now)
			after := take(t, cs, tg, now)
			if d.why == "" && string(after.cert) != string(before.cert) {
				t.Fatal("a good certificate was replaced")
			}
			if string(res.Cert) != string(after.cert) || !strings.Contains(string(res.Bundle), strings.TrimSpace(string(after.bundle))) {
				t.Fatal("Ensure's answer is not what the cluster holds")
			}
			again, err := Ensure(context.Background(), cs, tg, o, now)
			if err != nil || again.Replaced != "" {
				t.Fatalf("again: replaced %q, %v", again.Replaced, err)
			}
		})
	}
}

// TestStepRepairs: the controller repairs the same damage without init.
func TestStepRepairs(t *testing.T) {
	o := Options{Propagation: time.Millisecond, Settle: time.Second}
	for _, d := range damages() {
		t.Run(d.name, func(t *testing.T) {
			now := time.Now()
			cs, tg := newCluster(t, now, o)
			d.do(t, cs, tg, now)
			r := &Rotator{Client: cs, Target: tg, Options: o, Now: func() time.Time { return now }}
			s, err := r.Step(context.Background())
			if err != nil || s.Did == "" {
				t.Fatalf("did %q, %v", s.Did, err)
			}
			healthy(t, cs, tg, now)
		})
	}
}

// TestEnsureWrongType: a Secret of another type (which cannot change) is
// made again as kubernetes.io/tls.
func TestEnsureWrongType(t *testing.T) {
	now := time.Now()
	tg := AgentTarget("ferry")
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tg.Secret, Namespace: "ferry"}, Type: corev1.SecretTypeOpaque})
	res, err := Ensure(context.Background(), cs, tg, Options{}, now)
	if err != nil || res.Replaced == "" {
		t.Fatalf("replaced %q, %v", res.Replaced, err)
	}
	s, _ := cs.CoreV1().Secrets("ferry").Get(context.Background(), tg.Secret, metav1.GetOptions{})
	if s.Type != corev1.SecretTypeTLS || s.Labels[cluster.LabelName] != cluster.AgentName {
		t.Fatalf("type %s, labels %v", s.Type, s.Labels)
	}
	if _, err := current(s.Data).check(tg.DNSNames, now); err != nil {
		t.Fatal(err)
	}
}

// TestOptions: the defaults, a renewal derived from a short validity, and
// options that cannot work refused in a sentence.
func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.Validity != DefaultValidity || o.RenewBefore != DefaultRenewBefore {
		t.Fatalf("%+v, %v", o, err)
	}
	if o, _ := (Options{Validity: 3 * time.Minute}).withDefaults(); o.RenewBefore != time.Minute {
		t.Fatalf("renew before %s for 3 min certificates", o.RenewBefore)
	}
	for _, bad := range []Options{{Validity: time.Second}, {Validity: time.Hour, RenewBefore: 2 * time.Hour}, {RenewBefore: -time.Hour}, {Settle: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
