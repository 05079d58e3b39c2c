// Package key makes cosign key pairs and loads their private keys, the keys
// ferry signs packages with: the same files `cosign generate-key-pair`
// writes (cosign.key, cosign.pub), made and read with cosign's library. A
// Private is an artifact.Signer. Public keys (artifact.LoadPublicKey) need
// no cosign: verifying does not link it.
package key

import (
	"bytes"
	"crypto"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/atomicfile"
)

// ErrKey is artifact.ErrKey: every error of a key file that cannot be used
// matches it.
var ErrKey = artifact.ErrKey

// Pair is a cosign key pair as `cosign generate-key-pair` writes it: an
// ECDSA P-256 private key, PKCS #8, encrypted with the password
// (scrypt + secretbox) in an "ENCRYPTED SIGSTORE PRIVATE KEY" PEM block,
// and its public key as a PKIX "PUBLIC KEY" PEM block.
type Pair struct {
	Private []byte // cosign.key
	Public  []byte // cosign.pub
}

// Generate makes a new cosign key pair whose private key is encrypted with
// password (which may be empty, as cosign allows).
func Generate(password []byte) (*Pair, error) {
	keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return password, nil })
	if err != nil {
		return nil, fmt.Errorf("generate key pair: %w", err)
	}
	return &Pair{Private: keys.PrivateBytes, Public: keys.PublicBytes}, nil
}

// WriteFiles writes the pair to privatePath (mode 0600) and publicPath,
// each atomically.
func (kp *Pair) WriteFiles(privatePath, publicPath string) error {
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{privatePath, kp.Private, 0o600}, {publicPath, kp.Public, 0o644}} {
		if _, err := atomicfile.Write(f.path, f.mode, func(w io.Writer) error { _, err := w.Write(f.data); return err }); err != nil {
			return err
		}
	}
	return nil
}

// Private is a private key that signs packages; Name (its file) names it
// in messages.
type Private struct {
	Name string
	sv   signature.SignerVerifier
}

var _ artifact.Signer = (*Private)(nil)

// KeyName is the key's name, its file.
func (k *Private) KeyName() string { return k.Name }

// SignPayload signs payload (ECDSA P-256 with SHA-256, as cosign does).
func (k *Private) SignPayload(payload []byte) ([]byte, error) {
	return k.sv.SignMessage(bytes.NewReader(payload))
}

// VerifyPayload checks a signature over payload against this key.
func (k *Private) VerifyPayload(payload, sig []byte) error {
	return k.sv.VerifySignature(bytes.NewReader(sig), bytes.NewReader(payload))
}

// PublicKey is the key's public half.
func (k *Private) PublicKey() crypto.PublicKey {
	pub, err := k.sv.PublicKey()
	if err != nil {
		return nil
	}
	return pub
}

// LoadPrivate reads a cosign private key file (from ferry or
// `cosign generate-key-pair`) and decrypts it with password. A wrong
// password, a public key, or a damaged file is an ErrKey naming the file.
func LoadPrivate(path string, password []byte) (*Private, error) {
	data, block, err := artifact.ReadKeyFile(path)
	switch {
	case err != nil:
		return nil, err
	case block.Type == "PUBLIC KEY":
		return nil, fmt.Errorf("%w: %s is a public key; signing needs the private key (cosign.key)", ErrKey, path)
	case block.Type != cosign.SigstorePrivateKeyPemType && block.Type != cosign.CosignPrivateKeyPemType:
		return nil, fmt.Errorf("%w: %s holds a %q PEM block, not an encrypted cosign private key", ErrKey, path, block.Type)
	}
	sv, err := cosign.LoadPrivateKey(data, password, nil)
	switch {
	case err != nil && strings.Contains(err.Error(), "decryption failed"):
		return nil, fmt.Errorf("%w: wrong password for %s", ErrKey, path)
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, err)
	}
	return &Private{Name: path, sv: sv}, nil
}
