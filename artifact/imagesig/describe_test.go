package imagesig_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/imagesig"
)

// An RSA key names one fingerprint whether its PEM is PKIX or PKCS #1
// (both of which Verify reads), and the Key authority names it.
func TestKeyFingerprintForms(t *testing.T) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkix, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	a := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}))
	b := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.PublicKey)}))
	fa, fb := imagesig.KeyFingerprint(a), imagesig.KeyFingerprint(b)
	if !strings.HasPrefix(fa, "sha256:") || len(fa) != len("sha256:")+64 || fa != fb {
		t.Fatalf("PKIX %s, PKCS #1 %s", fa, fb)
	}
	if got := (imagesig.Authority{Key: &imagesig.KeyAuthority{PEM: b}}).Trusts(); len(got) != 1 || got[0] != "key "+fa {
		t.Fatalf("Trusts: %v", got)
	}
	if got := imagesig.KeyFingerprint("not a key"); got != "(unreadable)" {
		t.Fatalf("not a key: %s", got)
	}
}
