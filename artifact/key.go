package artifact

import (
	"crypto"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// ErrKey means a key file could not be used: unreadable, corrupt, of the
// wrong kind, or its password is wrong.
var ErrKey = errors.New("unusable key")

// KeyPair is a cosign key pair as `cosign generate-key-pair` writes it: an
// ECDSA P-256 private key, PKCS #8, encrypted with the password
// (scrypt + secretbox) in an "ENCRYPTED SIGSTORE PRIVATE KEY" PEM block,
// and its public key as a PKIX "PUBLIC KEY" PEM block.
type KeyPair struct {
	Private []byte // cosign.key
	Public  []byte // cosign.pub
}

// GenerateKeyPair makes a new cosign key pair whose private key is
// encrypted with password (which may be empty, as cosign allows).
func GenerateKeyPair(password []byte) (*KeyPair, error) {
	keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return password, nil })
	if err != nil {
		return nil, fmt.Errorf("generate key pair: %w", err)
	}
	return &KeyPair{Private: keys.PrivateBytes, Public: keys.PublicBytes}, nil
}

// WriteFiles writes the pair to privatePath (mode 0600) and publicPath,
// each atomically.
func (kp *KeyPair) WriteFiles(privatePath, publicPath string) error {
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{privatePath, kp.Private, 0o600}, {publicPath, kp.Public, 0o644}} {
		if _, err := writeFileMode(f.path, f.mode, func(w io.Writer) error { _, err := w.Write(f.data); return err }); err != nil {
			return err
		}
	}
	return nil
}

// PrivateKey signs packages; Name (its file) names it in messages.
type PrivateKey struct {
	Name string
	signature.SignerVerifier
}

// PublicKey verifies signatures; Name (its file) names it in messages.
type PublicKey struct {
	Name string
	signature.Verifier
}

// LoadPrivateKey reads a cosign private key file (from ferry or
// `cosign generate-key-pair`) and decrypts it with password. A wrong
// password, a public key, or a damaged file is an ErrKey naming the file.
func LoadPrivateKey(path string, password []byte) (*PrivateKey, error) {
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
		return nil, fmt.Errorf("%w: %s: %v", ErrKey, path, err)
	}
	return &PrivateKey{Name: path, SignerVerifier: sv}, nil
}

// LoadPublicKey reads a PEM public key file (cosign.pub) for verification.
// A private key or a damaged file is an ErrKey naming the file.
func LoadPublicKey(path string) (*PublicKey, error) {
	data, block, err := readPEM(path)
	switch {
	case err != nil:
		return nil, err
	case strings.Contains(block.Type, "PRIVATE KEY"):
		return nil, fmt.Errorf("%w: %s is a private key; verification needs the public key (cosign.pub)", ErrKey, path)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKey, path, err)
	}
	// As `cosign verify --key`: SHA-256 for ECDSA and RSA keys.
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKey, path, err)
	}
	return &PublicKey{Name: path, Verifier: v}, nil
}

// readPEM reads a key file and its first PEM block.
func readPEM(path string) ([]byte, *pem.Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, fmt.Errorf("%w: %s is not a PEM key file", ErrKey, path)
	}
	return data, block, nil
}
