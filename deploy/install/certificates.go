package install

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// The agent's certificates.
const (
	// renewBefore: a certificate expiring sooner is replaced by Install.
	renewBefore = 365 * 24 * time.Hour
	validity    = 10 * 365 * 24 * time.Hour
	// caKey is the CA's certificate in TLSSecretName, beside
	// corev1.TLSCertKey and corev1.TLSPrivateKeyKey.
	caKey = cluster.AgentCAKey
)

// dnsNames are the names the API server may use for the agent's Service.
func dnsNames(ns string) []string {
	svc := cluster.AgentServiceHost(ns)
	return []string{Name, Name + "." + ns, svc, svc + ".cluster.local"}
}

// certificates returns have (ca.crt, tls.crt, tls.key) when it holds a
// serving certificate for the agent's Service in ns, issued by its CA and
// valid for renewBefore after now; else a new CA and certificate (ECDSA
// P-256, valid validity), and true. The CA's key is not kept: a new
// certificate comes with a new CA.
func certificates(have map[string][]byte, ns string, now time.Time) (map[string][]byte, bool, error) {
	if have != nil && certificatesGood(have, ns, now) {
		return have, false, nil
	}
	caPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ferry agent CA (" + ns + ")"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caPriv.PublicKey, caPriv)
	if err != nil {
		return nil, false, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	names := dnsNames(ns)
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[2]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caPriv)
	if err != nil {
		return nil, false, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, false, err
	}
	return map[string][]byte{
		caKey:                   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, true, nil
}

func certificatesGood(have map[string][]byte, ns string, now time.Time) bool {
	pair, err := tls.X509KeyPair(have[corev1.TLSCertKey], have[corev1.TLSPrivateKeyKey])
	if err != nil {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(have[caKey]) {
		return false
	}
	for _, later := range []time.Time{now, now.Add(renewBefore)} {
		if _, err := leaf.Verify(x509.VerifyOptions{
			DNSName: dnsNames(ns)[2], Roots: roots, CurrentTime: later,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			return false
		}
	}
	return true
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
