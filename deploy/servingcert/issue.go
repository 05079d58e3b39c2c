// Package servingcert keeps the serving certificate of ferry's agent (its
// admission webhook and upload endpoint) valid for as long as the cluster
// runs: it issues a CA and a certificate for the agent's Service, trusts
// the CA where the agent's clients look (the webhook's caBundle, the CA
// ConfigMap), rotates them before they expire in an order that never
// leaves a server presenting a certificate its clients do not trust
// (Rotator, run by the Package controller), repairs what is expired,
// garbled, missing or untrusted (Ensure, run by ferry init), and serves the
// Secret's current certificate without a restart (Source, in the agent).
//
// Each certificate comes with a CA of its own whose key is dropped once
// the certificate is signed: a CA left in a bundle can vouch for nothing
// but the one certificate it signed, and the path every rotation takes is
// the path a CA's expiry needs.
package servingcert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// Defaults of Options.
const (
	// DefaultValidity is how long a certificate is valid: 10 years.
	DefaultValidity = 10 * 365 * 24 * time.Hour
	// DefaultRenewBefore is how long before its end a certificate is
	// replaced: a year.
	DefaultRenewBefore = 365 * 24 * time.Hour
	// DefaultPropagation is how long a new CA is trusted (the webhook's
	// caBundle changed) before a server presents a certificate from it:
	// API servers see a webhook configuration through a watch.
	DefaultPropagation = 10 * time.Second
	// DefaultSettle is how long the servers have to present a new
	// certificate before its predecessor's CA may leave the bundle (once
	// every server is seen presenting the new one).
	DefaultSettle = 30 * time.Second
	// DefaultCheck is how often the Rotator looks at the certificates when
	// nothing is due sooner.
	DefaultCheck = time.Minute
)

// Keys of the agent's TLS Secret beside ca.crt, tls.crt and tls.key: the
// certificate a rotation is about to put in place, and when its CA was
// trusted and the current certificate put in place.
const (
	nextCAKey   = "next-ca.crt"
	nextCertKey = "next-tls.crt"
	nextKeyKey  = "next-tls.key"
	caKey       = cluster.AgentCAKey

	// TrustedAtAnnotation on the Secret is when the pending certificate's
	// CA was added to the bundle (RFC 3339).
	TrustedAtAnnotation = "ferry.dev/next-trusted-at"
	// ServedAtAnnotation on the Secret is when its certificate was put in
	// place (RFC 3339).
	ServedAtAnnotation = "ferry.dev/served-at"
)

// Options configure the certificates. Zero values take the defaults.
type Options struct {
	// Validity: DefaultValidity if 0.
	Validity time.Duration
	// RenewBefore: DefaultRenewBefore if 0, or a third of Validity when
	// that is shorter. It must be shorter than Validity.
	RenewBefore time.Duration
	// Propagation: DefaultPropagation if 0.
	Propagation time.Duration
	// Settle: DefaultSettle if 0.
	Settle time.Duration
	// Check: DefaultCheck if 0.
	Check time.Duration
}

// Validate says what is wrong with o, if anything.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults is o with its defaults set, or an error naming what is
// wrong.
func (o Options) withDefaults() (Options, error) {
	if o.Validity == 0 {
		o.Validity = DefaultValidity
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = min(DefaultRenewBefore, o.Validity/3)
	}
	if o.Propagation == 0 {
		o.Propagation = DefaultPropagation
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Check == 0 {
		o.Check = DefaultCheck
	}
	switch {
	case o.Validity < time.Minute:
		return o, fmt.Errorf("certificate validity %s is shorter than a minute", o.Validity)
	case o.RenewBefore <= 0 || o.RenewBefore >= o.Validity:
		return o, fmt.Errorf("certificate renewal %s before expiry is not within its validity %s", o.RenewBefore, o.Validity)
	case o.Propagation < 0 || o.Settle < 0 || o.Check < 0:
		return o, errors.New("certificate rotation delays must not be negative")
	}
	return o, nil
}

// Target is what a certificate serves and where it is trusted.
type Target struct {
	// Namespace holds Secret and ConfigMap.
	Namespace string
	// Secret is a kubernetes.io/tls Secret: ca.crt, tls.crt, tls.key.
	Secret string
	// ConfigMap holds the bundle (key ca.crt) for clients that cannot
	// read Secret.
	ConfigMap string
	// Webhook is a MutatingWebhookConfiguration whose every webhook's
	// caBundle holds the bundle; none if empty.
	Webhook string
	// DNSNames are the names the certificate carries; the first is the
	// one servers are checked against.
	DNSNames []string
	// Labels are given to a Secret made anew.
	Labels map[string]string
}

// AgentTarget is the agent's certificate in ferry's namespace ns.
func AgentTarget(ns string) Target {
	svc := cluster.AgentServiceHost(ns)
	return Target{
		Namespace: ns, Secret: cluster.AgentTLSSecretName, ConfigMap: cluster.AgentCAConfigMap,
		Webhook:  cluster.AgentWebhookName(ns),
		DNSNames: []string{svc, cluster.AgentName, cluster.AgentName + "." + ns, svc + ".cluster.local"},
		Labels:   cluster.AgentLabels(),
	}
}

// Pair is a serving certificate, its key and the CA that signed it, PEM.
type Pair struct {
	CA, Cert, Key []byte
}

// Issue makes a CA and a certificate for names signed by it (ECDSA
// P-256), both valid from an hour before now (clocks differ) for validity;
// the CA's key is dropped.
func Issue(names []string, now time.Time, validity time.Duration) (Pair, error) {
	caPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	first := ""
	if len(names) > 0 {
		first = names[0]
	}
	notBefore, notAfter := now.Add(-time.Hour), now.Add(validity)
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ferry CA for " + first + " " + now.UTC().Format(time.RFC3339)},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caPriv.PublicKey, caPriv)
	if err != nil {
		return Pair{}, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return Pair{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: first},
		DNSNames:     names,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caPriv)
	if err != nil {
		return Pair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{
		CA:   pemCert(caDER),
		Cert: pemCert(leafDER),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// Data is p as a TLS Secret's data.
func (p Pair) Data() map[string][]byte {
	return map[string][]byte{caKey: p.CA, corev1.TLSCertKey: p.Cert, corev1.TLSPrivateKeyKey: p.Key}
}

// current is the Secret data's serving pair; next its pending one.
func current(data map[string][]byte) Pair {
	return Pair{CA: data[caKey], Cert: data[corev1.TLSCertKey], Key: data[corev1.TLSPrivateKeyKey]}
}

func next(data map[string][]byte) (Pair, bool) {
	p := Pair{CA: data[nextCAKey], Cert: data[nextCertKey], Key: data[nextKeyKey]}
	return p, len(p.CA)+len(p.Cert)+len(p.Key) > 0
}

// checked is a pair parsed and found to serve.
type checked struct {
	leaf, ca *x509.Certificate
}

// check parses p and says why it cannot serve names at now, if it
// cannot: a key that is not the certificate's, a certificate its CA did
// not sign, or one that is not valid now or does not name names[0].
func (p Pair) check(names []string, now time.Time) (checked, error) {
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return checked{}, fmt.Errorf("the certificate and key do not parse as a pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return checked{}, fmt.Errorf("the certificate does not parse: %w", err)
	}
	cas := parseBundle(p.CA)
	if len(cas) != 1 {
		return checked{}, fmt.Errorf("%s holds %d CA certificates, not one", caKey, len(cas))
	}
	roots := x509.NewCertPool()
	roots.AddCert(cas[0])
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if len(names) > 0 {
		opts.DNSName = names[0]
	}
	if _, err := leaf.Verify(opts); err != nil {
		if now.After(leaf.NotAfter) {
			return checked{}, fmt.Errorf("the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		return checked{}, fmt.Errorf("the certificate does not verify: %w", err)
	}
	return checked{leaf: leaf, ca: cas[0]}, nil
}

// due says whether c is to be replaced at now: within renewBefore of its
// end, or issued for longer than validity (the options changed).
func (c checked) due(now time.Time, o Options) bool {
	return !now.Before(c.leaf.NotAfter.Add(-o.RenewBefore)) || c.leaf.NotAfter.After(now.Add(o.Validity+time.Minute))
}

// renewAt is when c is due.
func (c checked) renewAt(o Options) time.Time { return c.leaf.NotAfter.Add(-o.RenewBefore) }

// sameCert says whether a and b are the same certificate.
func sameCert(a, b *x509.Certificate) bool { return bytes.Equal(a.Raw, b.Raw) }

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
