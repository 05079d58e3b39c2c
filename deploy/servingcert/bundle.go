package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// maxBundle bounds the CA certificates a bundle is read for: a rotation
// holds two; more are what someone else put there.
const maxBundle = 16

// parseBundle is the CA certificates of PEM bundle b, in order, each
// once; blocks that are not CA certificates are skipped.
func parseBundle(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for len(out) < maxBundle {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !c.IsCA || holds(out, c) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func holds(cas []*x509.Certificate, c *x509.Certificate) bool {
	for _, have := range cas {
		if sameCert(have, c) {
			return true
		}
	}
	return false
}

// encodeBundle is cas as PEM.
func encodeBundle(cas []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range cas {
		b.Write(pemCert(c.Raw))
	}
	return b.Bytes()
}

// Union is bundle a with the CA certificates of b it lacks, those expired
// at now left out of both: what a bundle becomes when trust is added and
// none taken away but the expired. Init writes bundles so, leaving their
// trimming to the Rotator.
func Union(a, b []byte, now time.Time) []byte {
	var out []*x509.Certificate
	for _, c := range append(parseBundle(a), parseBundle(b)...) {
		if now.Before(c.NotAfter) && !holds(out, c) {
			out = append(out, c)
		}
	}
	return encodeBundle(out)
}

// trust is where the target's bundle is: the webhook's caBundles and the
// ConfigMap, as read.
type trust struct {
	webhooks   [][]byte // each webhook's caBundle
	hasWebhook bool     // the configuration exists
	configMap  []byte
	hasCM      bool
}

// cas is every CA the places hold, in order, each once.
func (t trust) cas() []*x509.Certificate {
	all := bytes.Join(t.webhooks, nil)
	return parseBundle(append(all, t.configMap...))
}

// bundleHolds says whether PEM bundle b holds c, wherever in it: a bundle
// is read for at most maxBundle CAs, and others' CAs before c must not
// hide it (the Rotator would write the bundle back unchanged and look
// again at once, for ever). Bounded by the object's size; nothing parsed.
func bundleHolds(b []byte, c *x509.Certificate) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" && bytes.Equal(block.Bytes, c.Raw) {
			return true
		}
	}
}

// trusts says whether every place that exists holds ca (and one does).
func (t trust) trusts(ca *x509.Certificate) bool {
	for _, b := range t.webhooks {
		if !bundleHolds(b, ca) {
			return false
		}
	}
	if t.hasCM && !bundleHolds(t.configMap, ca) {
		return false
	}
	return t.hasWebhook || t.hasCM
}

// only says whether every place that exists holds exactly cas.
func (t trust) only(cas []*x509.Certificate) bool {
	want := encodeBundle(cas)
	for _, b := range t.webhooks {
		if !bytes.Equal(b, want) {
			return false
		}
	}
	return !t.hasCM || bytes.Equal(t.configMap, want)
}

// readTrust reads the target's bundle.
func readTrust(ctx context.Context, cs kubernetes.Interface, t Target) (trust, error) {
	var tr trust
	cm, err := cs.CoreV1().ConfigMaps(t.Namespace).Get(ctx, t.ConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		tr.configMap, tr.hasCM = []byte(cm.Data[caKey]), true
	case !apierrors.IsNotFound(err):
		return tr, err
	}
	if t.Webhook == "" {
		return tr, nil
	}
	w, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, t.Webhook, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return tr, nil
	case err != nil:
		return tr, err
	}
	tr.hasWebhook = true
	for _, h := range w.Webhooks {
		tr.webhooks = append(tr.webhooks, h.ClientConfig.CABundle)
	}
	return tr, nil
}

// writeTrust makes bundle the target's: every webhook's caBundle (when the
// configuration exists: init makes it) and the ConfigMap's ca.crt (when it
// exists: init makes it). It changes only what differs.
func writeTrust(ctx context.Context, cs kubernetes.Interface, t Target, bundle []byte) error {
	cms := cs.CoreV1().ConfigMaps(t.Namespace)
	cm, err := cms.Get(ctx, t.ConfigMap, metav1.GetOptions{})
	switch {
	case err == nil && cm.Data[caKey] != string(bundle):
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[caKey] = string(bundle)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	if t.Webhook == "" {
		return nil
	}
	hooks := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	w, err := hooks.Get(ctx, t.Webhook, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	changed := false
	for i := range w.Webhooks {
		if !bytes.Equal(w.Webhooks[i].ClientConfig.CABundle, bundle) {
			w.Webhooks[i].ClientConfig.CABundle, changed = bundle, true
		}
	}
	if changed {
		_, err = hooks.Update(ctx, w, metav1.UpdateOptions{})
	}
	return err
}
