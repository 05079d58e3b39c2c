package servingcert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// maxPEM bounds a certificate or key a Secret gives Source: a chain of a
// few certificates is a few KiB.
const maxPEM = 64 << 10

// Source is a serving certificate kept current from a TLS Secret through
// the API (Watch): each handshake gets the latest good one, so a rotated
// certificate is served without a restart, and without the minute or two
// a mounted Secret takes to change on a node. A Secret that does not hold
// a good pair, or is deleted, leaves the last good one served.
type Source struct {
	cert atomic.Pointer[tls.Certificate]
}

// NewSource serves initial until a Secret gives another.
func NewSource(initial tls.Certificate) *Source {
	s := &Source{}
	s.cert.Store(&initial)
	return s
}

// GetCertificate is for tls.Config.GetCertificate.
func (s *Source) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// Set serves the pair of a TLS Secret's data (tls.crt, tls.key) from now
// on, when it is one; otherwise it returns why and keeps the last.
func (s *Source) Set(data map[string][]byte) error {
	crt, key := data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]
	if len(crt) > maxPEM || len(key) > maxPEM {
		return fmt.Errorf("the certificate or key is larger than %d KiB", maxPEM>>10)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return err
	}
	if cur := s.cert.Load(); cur != nil && len(cur.Certificate) > 0 && string(cur.Certificate[0]) == string(pair.Certificate[0]) {
		return nil
	}
	s.cert.Store(&pair)
	return nil
}

// Watch keeps s on Secret name of namespace ns until ctx is done: read
// at once, then on every change, a broken watch started again after a
// few seconds. What cannot be served is logged and skipped. With no name
// it returns at once.
func (s *Source) Watch(ctx context.Context, cs kubernetes.Interface, ns, name string, log *slog.Logger) {
	if name == "" {
		return
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	secrets := cs.CoreV1().Secrets(ns)
	set := func(sec *corev1.Secret) {
		if sec.Name != name {
			return
		}
		if err := s.Set(sec.Data); err != nil {
			log.Warn("serving certificate kept", "secret", ns+"/"+name, "error", err.Error())
		}
	}
	for ctx.Err() == nil {
		err := func() error {
			sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			set(sec)
			w, err := secrets.Watch(ctx, metav1.ListOptions{
				FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
				ResourceVersion: sec.ResourceVersion,
			})
			if err != nil {
				return err
			}
			defer w.Stop()
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified:
					if sec, ok := ev.Object.(*corev1.Secret); ok {
						set(sec)
					}
				case watch.Error:
					return errors.New("the watch ended")
				}
			}
			return nil
		}()
		if err != nil && ctx.Err() == nil {
			log.Debug("serving certificate watch", "secret", ns+"/"+name, "error", err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}
}
