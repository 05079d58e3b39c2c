package imagesig

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// Trusts names whom a has to trust, briefly, for people: its key by
// fingerprint ("key sha256:…"), or each keyless identity ("keyless ISSUER
// SUBJECT", a regular expression between slashes).
func (a Authority) Trusts() []string {
	var out []string
	if a.Key != nil {
		out = append(out, "key "+KeyFingerprint(a.Key.PEM))
	}
	if a.Keyless != nil {
		for _, id := range a.Keyless.Identities {
			out = append(out, "keyless "+either(id.Issuer, id.IssuerRegExp)+" "+either(id.Subject, id.SubjectRegExp))
		}
	}
	return out
}

func either(exact, re string) string {
	if exact != "" || re == "" {
		return exact
	}
	return "/" + re + "/"
}

// KeyFingerprint is sha256:<hex> of a PEM public key's DER (PKIX) form,
// the key read as Verify reads it (PKIX or PKCS #1), or "(unreadable)"
// when it does not parse.
func KeyFingerprint(pemKey string) string {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(pemKey))
	if err != nil {
		return "(unreadable)"
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "(unreadable)"
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}
