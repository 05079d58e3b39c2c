package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Someone who can write the webhook configuration and the CA ConfigMap
// puts 16 CAs of their own (valid, each once) before ferry's in both
// bundles. Before, the Rotator read only the first 16 CAs of a bundle, did
// not see ferry's, wrote the same bundle back and asked to look again at
// once: a hot loop against the API server that never reached the trim.
// Now it trims the bundle back to ferry's CA once the servers present its
// certificate, and waits between looks.
func TestRotatorBundleOfForeignCAs(t *testing.T) {
	o := Options{Validity: 10 * time.Minute, RenewBefore: 4 * time.Minute, Propagation: time.Second, Settle: time.Second}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cs, tg := newCluster(t, now, o)
	ctx := context.Background()
	var foreign []byte
	for range maxBundle {
		p, err := Issue([]string{"evil"}, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		foreign = append(foreign, p.CA...)
	}
	hooks := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	w, err := hooks.Get(ctx, tg.Webhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := w.Webhooks[0].ClientConfig.CABundle
	bundle := append(append([]byte{}, foreign...), ours...)
	for i := range w.Webhooks {
		w.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if _, err := hooks.Update(ctx, w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("ferry").Get(ctx, tg.ConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[caKey] = string(bundle)
	if _, err := cs.CoreV1().ConfigMaps("ferry").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	presents := leafOf(t, take(t, cs, tg, now).cert)
	r := &Rotator{Client: cs, Target: tg, Options: o, Now: func() time.Time { return now },
		Presented: func(context.Context) ([]*x509.Certificate, error) { return []*x509.Certificate{presents}, nil }}
	immediate := 0
	for range 10 {
		s, err := r.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Next.After(now) && s.Did == "trusted the certificate's CA, which the bundle lacked" {
			immediate++
		}
		now = now.Add(2 * time.Second)
	}
	got := take(t, cs, tg, now).bundle
	if immediate > 1 || !bytes.Equal(got, ours) {
		t.Fatalf("%d steps asked to look again at once for a CA the bundle holds; the bundle holds %d CAs, want ferry's alone", immediate, bytes.Count(got, []byte("BEGIN CERTIFICATE")))
	}
}
