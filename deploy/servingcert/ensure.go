package servingcert

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Ensured is what Ensure found or made.
type Ensured struct {
	// Bundle is what the target's clients are to trust: the Secret's CA,
	// a pending certificate's, and those the bundle held that have not
	// expired (the Rotator trims them).
	Bundle []byte
	// Cert is the Secret's serving certificate (PEM).
	Cert []byte
	// Replaced says why the certificate was replaced; empty when it was
	// kept.
	Replaced string
}

// Ensure repairs the target's certificate, as ferry init does: a Secret
// that is missing, garbled, expired or not for the target's names is
// replaced, its CA trusted first (and, when a server may still present a
// certificate the bundle trusts, Propagation before the Secret changes);
// a bundle that lacks the Secret's CA, or a pending certificate's, gets
// it. A certificate that is merely due is kept: the Rotator replaces it in
// order. The webhook configuration, when init has not made it yet, is
// left to init, which writes Bundle into it.
func Ensure(ctx context.Context, cs kubernetes.Interface, t Target, o Options, now time.Time) (Ensured, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Ensured{}, err
	}
	r := &Rotator{Client: cs, Target: t, Options: o, Now: func() time.Time { return now }}
	secrets := cs.CoreV1().Secrets(t.Namespace)
	secret, err := secrets.Get(ctx, t.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return Ensured{}, err
	}
	tr, err := readTrust(ctx, cs, t)
	if err != nil {
		return Ensured{}, err
	}
	var res Ensured
	if secret == nil {
		res.Replaced = "missing"
	} else if _, err := current(secret.Data).check(t.DNSNames, now); err != nil {
		res.Replaced = err.Error()
	}
	if res.Replaced != "" {
		if err := r.replace(ctx, tr, secret, now, o); err != nil {
			return Ensured{}, err
		}
		if secret, err = secrets.Get(ctx, t.Secret, metav1.GetOptions{}); err != nil {
			return Ensured{}, err
		}
		if tr, err = readTrust(ctx, cs, t); err != nil {
			return Ensured{}, err
		}
	}
	res.Bundle = Union(encodeBundle(tr.cas()), secret.Data[caKey], now)
	if p, ok := next(secret.Data); ok {
		if _, err := p.check(t.DNSNames, now); err == nil {
			res.Bundle = Union(res.Bundle, p.CA, now)
		}
	}
	res.Cert = secret.Data[corev1.TLSCertKey]
	for _, c := range parseBundle(res.Bundle) {
		if !tr.trusts(c) {
			return res, writeTrust(ctx, cs, t, res.Bundle)
		}
	}
	return res, nil
}
