package servingcert

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Rotator keeps a target's certificate valid. Each Step looks at the
// Secret and the bundle and takes at most one step of a rotation, in this
// order: a new pair is kept in the Secret as pending; its CA is added to
// the bundle; after Propagation the pending pair becomes the Secret's
// certificate (servers reload it); after Settle, once every server
// presents it, the other CAs leave the bundle. A Secret that cannot serve
// (missing, garbled, expired, not for the target's names) is replaced at
// once, its CA trusted first; a bundle that lacks the Secret's CA gets it.
type Rotator struct {
	// Client reads and writes the target's objects.
	Client kubernetes.Interface
	Target Target
	// Options: the defaults if zero.
	Options Options
	// Presented, if set, returns the certificate each of the target's
	// servers presents now; the old CA leaves the bundle only when each
	// is the Secret's. If nil, after Settle alone.
	Presented func(context.Context) ([]*x509.Certificate, error)
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// Logger receives what each step did; nil discards it.
	Logger *slog.Logger
}

// Step is what one look at the certificates did.
type Step struct {
	// Did says what changed; empty when nothing did.
	Did string
	// Next is when to look again.
	Next time.Time
}

// Run takes steps until ctx is done, each when the last one said (within
// Options.Check), and again a few seconds after an error. It returns
// nil when ctx is done, or the options' error.
func (r *Rotator) Run(ctx context.Context) error {
	o, err := r.Options.withDefaults()
	if err != nil {
		return err
	}
	log := r.logger()
	for {
		wait := o.Check
		s, err := r.Step(ctx)
		switch {
		case err != nil:
			log.Warn("certificates", "secret", r.Target.Secret, "error", err.Error())
			wait = min(wait, 5*time.Second)
		default:
			if s.Did != "" {
				log.Info("certificates", "secret", r.Target.Secret, "did", s.Did, "next", s.Next.UTC().Format(time.RFC3339))
			}
			wait = min(wait, max(s.Next.Sub(r.now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (r *Rotator) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Rotator) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Step takes at most one step of a rotation (see Rotator) and says when to
// look again.
func (r *Rotator) Step(ctx context.Context) (Step, error) {
	o, err := r.Options.withDefaults()
	if err != nil {
		return Step{}, err
	}
	now := r.now()
	secret, err := r.Client.CoreV1().Secrets(r.Target.Namespace).Get(ctx, r.Target.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return Step{}, err
	}
	tr, err := readTrust(ctx, r.Client, r.Target)
	if err != nil {
		return Step{}, err
	}
	var data map[string][]byte
	if secret != nil {
		data = secret.Data
	}
	cur, err := current(data).check(r.Target.DNSNames, now)
	if err != nil {
		why := "missing"
		if secret != nil {
			why = err.Error()
		}
		if err := r.replace(ctx, tr, secret, now, o); err != nil {
			return Step{}, err
		}
		return Step{Did: "replaced the certificate: " + why, Next: now.Add(o.Settle)}, nil
	}
	if pending, ok := next(data); ok {
		return r.advance(ctx, secret, tr, pending, now, o)
	}
	if !tr.trusts(cur.ca) {
		if err := writeTrust(ctx, r.Client, r.Target, Union(encodeBundle(tr.cas()), pemCert(cur.ca.Raw), now)); err != nil {
			return Step{}, err
		}
		return Step{Did: "trusted the certificate's CA, which the bundle lacked", Next: now}, nil
	}
	if !tr.only([]*x509.Certificate{cur.ca}) {
		return r.trim(ctx, secret, tr, cur, now, o)
	}
	if cur.due(now, o) {
		p, err := Issue(r.Target.DNSNames, now, o.Validity)
		if err != nil {
			return Step{}, err
		}
		upd := maps.Clone(data)
		upd[nextCAKey], upd[nextCertKey], upd[nextKeyKey] = p.CA, p.Cert, p.Key
		if err := r.writeSecret(ctx, secret, upd, map[string]string{TrustedAtAnnotation: ""}); err != nil {
			return Step{}, err
		}
		return Step{Did: "issued the next certificate, valid until " + cur.leaf.NotAfter.UTC().Format(time.RFC3339) + " now", Next: now}, nil
	}
	return Step{Next: cur.renewAt(o)}, nil
}

// advance takes the pending pair one step: its CA trusted, then, after
// Propagation, put in place.
func (r *Rotator) advance(ctx context.Context, secret *corev1.Secret, tr trust, pending Pair, now time.Time, o Options) (Step, error) {
	// Checked at the moment it will be served from: after Propagation.
	p, err := pending.check(r.Target.DNSNames, now)
	if err != nil {
		upd := maps.Clone(secret.Data)
		delete(upd, nextCAKey)
		delete(upd, nextCertKey)
		delete(upd, nextKeyKey)
		if err := r.writeSecret(ctx, secret, upd, map[string]string{TrustedAtAnnotation: ""}); err != nil {
			return Step{}, err
		}
		return Step{Did: "dropped the pending certificate: " + err.Error(), Next: now}, nil
	}
	if !tr.trusts(p.ca) {
		if err := writeTrust(ctx, r.Client, r.Target, Union(encodeBundle(tr.cas()), pending.CA, now)); err != nil {
			return Step{}, err
		}
		if err := r.writeSecret(ctx, secret, secret.Data, map[string]string{TrustedAtAnnotation: now.UTC().Format(time.RFC3339)}); err != nil {
			return Step{}, err
		}
		return Step{Did: "trusted the next certificate's CA", Next: now.Add(o.Propagation)}, nil
	}
	at, err := time.Parse(time.RFC3339, secret.Annotations[TrustedAtAnnotation])
	if err != nil || at.After(now) {
		// Trusted by someone else's write, or when is unknown: from now.
		if err := r.writeSecret(ctx, secret, secret.Data, map[string]string{TrustedAtAnnotation: now.UTC().Format(time.RFC3339)}); err != nil {
			return Step{}, err
		}
		return Step{Next: now.Add(o.Propagation)}, nil
	}
	if ready := at.Add(o.Propagation); now.Before(ready) {
		return Step{Next: ready}, nil
	}
	upd := map[string][]byte{caKey: pending.CA, corev1.TLSCertKey: pending.Cert, corev1.TLSPrivateKeyKey: pending.Key}
	if err := r.writeSecret(ctx, secret, upd, map[string]string{TrustedAtAnnotation: "", ServedAtAnnotation: now.UTC().Format(time.RFC3339)}); err != nil {
		return Step{}, err
	}
	return Step{Did: "put the next certificate in place, valid until " + p.leaf.NotAfter.UTC().Format(time.RFC3339), Next: now.Add(o.Settle)}, nil
}

// trim leaves the Secret's CA alone in the bundle, once the servers have
// had Settle to present its certificate and each does; meanwhile expired
// CAs leave it.
func (r *Rotator) trim(ctx context.Context, secret *corev1.Secret, tr trust, cur checked, now time.Time, o Options) (Step, error) {
	served, err := time.Parse(time.RFC3339, secret.Annotations[ServedAtAnnotation])
	if err != nil || served.After(now) {
		// When it was put in place is unknown: from now.
		if err := r.writeSecret(ctx, secret, secret.Data, map[string]string{ServedAtAnnotation: now.UTC().Format(time.RFC3339)}); err != nil {
			return Step{}, err
		}
		served = now
	}
	settled, why := !now.Before(served.Add(o.Settle)), ""
	if settled && r.Presented != nil {
		certs, err := r.Presented(ctx)
		for _, c := range certs {
			if err == nil && !sameCert(c, cur.leaf) {
				err = fmt.Errorf("a server presents the certificate %s issued %s", c.SerialNumber.Text(16), c.NotBefore.UTC().Format(time.RFC3339))
			}
		}
		if err != nil {
			settled, why = false, "kept the bundle: "+err.Error()
		}
	}
	keep := []*x509.Certificate{cur.ca}
	if !settled {
		for _, c := range tr.cas() {
			if now.Before(c.NotAfter) && !holds(keep, c) {
				keep = append(keep, c)
			}
		}
	}
	next := served.Add(o.Settle)
	if !next.After(now) { // waiting for a server: look again soon
		next = now.Add(min(o.Settle, 10*time.Second))
	}
	if tr.only(keep) {
		return Step{Did: why, Next: next}, nil
	}
	if err := writeTrust(ctx, r.Client, r.Target, encodeBundle(keep)); err != nil {
		return Step{}, err
	}
	if len(keep) == 1 {
		return Step{Did: "trimmed the bundle to the certificate's CA", Next: now}, nil
	}
	return Step{Did: "dropped expired CAs from the bundle", Next: next}, nil
}

// replace puts a new pair in place of a Secret that cannot serve: its CA
// trusted first, after Propagation when a server may still present a
// certificate the bundle trusts (the Secret was deleted or garbled, not
// expired), so that those keep working meanwhile.
func (r *Rotator) replace(ctx context.Context, tr trust, secret *corev1.Secret, now time.Time, o Options) error {
	p, err := Issue(r.Target.DNSNames, now, o.Validity)
	if err != nil {
		return err
	}
	live := false
	for _, c := range tr.cas() {
		live = live || now.Before(c.NotAfter)
	}
	if err := writeTrust(ctx, r.Client, r.Target, Union(encodeBundle(tr.cas()), p.CA, now)); err != nil {
		return err
	}
	if live && tr.hasWebhook && o.Propagation > 0 {
		t := time.NewTimer(o.Propagation)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return r.writeSecret(ctx, secret, p.Data(), map[string]string{TrustedAtAnnotation: "", ServedAtAnnotation: now.UTC().Format(time.RFC3339)})
}

// writeSecret makes data the target Secret's (kubernetes.io/tls), with
// annotations set (an empty value removes one). An update conflicts when
// the Secret changed since it was read.
func (r *Rotator) writeSecret(ctx context.Context, cur *corev1.Secret, data map[string][]byte, annotations map[string]string) error {
	secrets := r.Client.CoreV1().Secrets(r.Target.Namespace)
	if cur != nil && cur.Type != corev1.SecretTypeTLS { // the type cannot change
		if err := secrets.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		cur = nil
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: r.Target.Secret, Namespace: r.Target.Namespace, Labels: r.Target.Labels},
		Type:       corev1.SecretTypeTLS,
	}
	if cur != nil {
		s = cur.DeepCopy()
	}
	s.Data = data
	for k, v := range annotations {
		if v == "" {
			delete(s.Annotations, k)
			continue
		}
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
	var err error
	if cur == nil {
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	} else {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w", r.Target.Namespace, r.Target.Secret, err)
	}
	return nil
}
