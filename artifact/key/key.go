// Package key makes and loads cosign key pairs, the keys ferry signs and
// verifies packages with: the same files `cosign generate-key-pair` writes
// (cosign.key, cosign.pub), read with cosign's and sigstore's libraries.
// A Private is an artifact.Signer, a Public an artifact.Verifier.
package key

import (
	"bytes"
	"crypto"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
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

// Public is a public key that verifies signatures; Name (its file) names
// it in messages.
type Public struct {
	Name string
	v    signature.Verifier
	pub  crypto.PublicKey
}

var _ artifact.Verifier = (*Public)(nil)

// KeyName is the key's name, its file.
func (k *Public) KeyName() string { return k.Name }

// VerifyPayload checks a signature over payload against this key.
func (k *Public) VerifyPayload(payload, sig []byte) error {
	return k.v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(payload))
}

// PublicKey is the key.
func (k *Public) PublicKey() crypto.PublicKey { return k.pub }

// LoadPrivate reads a cosign private key file (from ferry or
// `cosign generate-key-pair`) and decrypts it with password. A wrong
// password, a public key, or a damaged file is an ErrKey naming the file.
func LoadPrivate(path string, password []byte) (*Private, error) {
	data, block, err := readPEM(path)
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

// LoadPublic reads a PEM public key file (cosign.pub) for verification.
// A private key or a damaged file is an ErrKey naming the file.
func LoadPublic(path string) (*Public, error) {
	data, block, err := readPEM(path)
	switch {
	case err != nil:
		return nil, err
	case strings.Contains(block.Type, "PRIVATE KEY"):
		return nil, fmt.Errorf("%w: %s is a private key; verification needs the public key (cosign.pub)", ErrKey, path)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, err)
	}
	// As `cosign verify --key`: SHA-256 for ECDSA and RSA keys.
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, err)
	}
	return &Public{Name: path, v: v, pub: pub}, nil
}

// readPEM reads a key file and its first PEM block.
func readPEM(path string) ([]byte, *pem.Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, fmt.Errorf("%w: %s is not a PEM key file", ErrKey, path)
	}
	return data, block, nil
}
