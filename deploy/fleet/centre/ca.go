package centre

import (
	"context"
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
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// CASecretName is the Secret (type kubernetes.io/tls) holding the centre's
// CA: made on first start, kept, pinned by every join token.
const CASecretName = "ferry-fleet-ca"

// Lifetimes of the certificates EnsureCA makes.
const (
	caLifetime   = 20 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
)

// authority is the centre's CA, parsed.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// pin is what a join token pins: the CA certificate's hash.
func (a *authority) pin() string { return wire.CAHash(a.cert.Raw) }

// EnsureCA makes the centre's CA on first use (the Secret CASecretName;
// kept, never replaced) and a serving certificate for hosts (names or IP
// addresses), signed by it and valid for a year. It returns the CA's PEM
// and the certificate for a tls.Config, its chain holding the CA (a
// member checks the CA its token pins against that chain).
func (c *Centre) EnsureCA(ctx context.Context, hosts []string) (caPEM []byte, cert tls.Certificate, err error) {
	ca, err := c.authority(ctx)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now() // TLS checks certificates against the wall clock, not Centre.Now
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "ferry fleet centre"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("make the centre's serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	return ca.pem, tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: leafKey, Leaf: leaf}, nil
}

// authority reads the CA's Secret, making it first if there is none (two
// centres starting at once: the second reads the first's).
func (c *Centre) authority(ctx context.Context) (*authority, error) {
	var s corev1.Secret
	err := c.Client.Get(ctx, c.key(CASecretName), &s)
	if apierrors.IsNotFound(err) {
		s, err = c.newAuthority()
		if err != nil {
			return nil, err
		}
		err = c.Client.Create(ctx, &s)
		if apierrors.IsAlreadyExists(err) {
			err = c.fresh().Get(ctx, c.key(CASecretName), &s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the centre's CA (Secret %s/%s): %w", c.ns(), CASecretName, err)
	}
	return parseAuthority(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
}

func (c *Centre) newAuthority() (corev1.Secret, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return corev1.Secret{}, err
	}
	now := time.Now() // TLS checks certificates against the wall clock, not Centre.Now
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ferry fleet CA", Organization: []string{"ferry"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return corev1.Secret{}, fmt.Errorf("make the centre's CA: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return corev1.Secret{}, err
	}
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns(), Name: CASecretName, Labels: map[string]string{labelPart: "ca"}},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		},
	}, nil
}

func parseAuthority(certPEM, keyPEM []byte) (*authority, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("the centre's CA (Secret %s) holds no PEM certificate and key", CASecretName)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the centre's CA certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the centre's CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the centre's CA key is not its certificate's")
	}
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(cb)}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
