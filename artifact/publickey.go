package artifact

import (
	"bytes"
	"crypto"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	sigstore "github.com/sigstore/sigstore/pkg/signature"
)

// PublicKey is a public key that verifies signatures, as `cosign verify
// --key` does; Name (its file) names it in messages. Package artifact/key
// makes and loads the private keys.
type PublicKey struct {
	Name string
	v    sigstore.Verifier
	pub  crypto.PublicKey
	pem  []byte
}

var _ Verifier = (*PublicKey)(nil)

// KeyName is the key's name, its file.
func (k *PublicKey) KeyName() string { return k.Name }

// VerifyPayload checks a signature over payload against this key.
func (k *PublicKey) VerifyPayload(payload, sig []byte) error {
	return k.v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(payload))
}

// PublicKey is the key.
func (k *PublicKey) PublicKey() crypto.PublicKey { return k.pub }

// PEM is the key as it was read (a cosign.pub file's bytes).
func (k *PublicKey) PEM() []byte { return k.pem }

// Verifiers are keys as verification takes them.
func Verifiers(keys []*PublicKey) []Verifier {
	out := make([]Verifier, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

// LoadPublicKey reads a PEM public key file (cosign.pub) for verification.
// A private key or a damaged file is an ErrKey naming the file.
func LoadPublicKey(path string) (*PublicKey, error) {
	data, block, err := ReadKeyFile(path)
	if err != nil {
		return nil, err
	}
	return parsePublicKey(path, data, block)
}

// ParsePublicKey reads a PEM public key (cosign.pub's bytes, from a Secret
// for instance) that name names in messages.
func ParsePublicKey(name string, data []byte) (*PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: %s is not a PEM key", ErrKey, name)
	}
	return parsePublicKey(name, data, block)
}

func parsePublicKey(name string, data []byte, block *pem.Block) (*PublicKey, error) {
	if strings.Contains(block.Type, "PRIVATE KEY") {
		return nil, fmt.Errorf("%w: %s is a private key; verification needs the public key (cosign.pub)", ErrKey, name)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, name, err)
	}
	// As `cosign verify --key`: SHA-256 for ECDSA and RSA keys.
	v, err := sigstore.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, name, err)
	}
	return &PublicKey{Name: name, v: v, pub: pub, pem: data}, nil
}

// MaxKeyFileSize bounds a key file (a PEM key is under 4 KiB).
const MaxKeyFileSize = 64 << 10

// ReadKeyFile reads a PEM key file and its first block; an unreadable file
// or one with no PEM block is an ErrKey naming the file. LoadPublicKey and
// package artifact/key's LoadPrivate read key files with it.
func ReadKeyFile(path string) ([]byte, *pem.Block, error) {
	data, err := confine.ReadPath(path, MaxKeyFileSize)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, fmt.Errorf("%w: %s is not a PEM key file", ErrKey, path)
	}
	return data, block, nil
}
