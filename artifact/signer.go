package artifact

import (
	"crypto"
	"errors"
)

// ErrKey means a key could not be used: a key file unreadable, corrupt, of
// the wrong kind, or its password wrong; or no key given where one is
// needed.
var ErrKey = errors.New("unusable key")

// A Verifier checks signatures made with one key. Package artifact/key
// loads cosign public keys (cosign.pub) as Verifiers; anything that can
// check a signature over bytes may be one (a KMS, an HSM).
type Verifier interface {
	// KeyName names the key in messages and results (its file, for a key
	// file).
	KeyName() string
	// VerifyPayload returns nil when sig is a valid signature over payload
	// by this key.
	VerifyPayload(payload, sig []byte) error
	// PublicKey is the key; nil when it is not known.
	PublicKey() crypto.PublicKey
}

// A Signer signs package roots with one key, and checks its own signatures
// (signing again with the same key changes nothing). Package artifact/key
// loads cosign private keys (cosign.key) as Signers.
type Signer interface {
	Verifier
	// SignPayload returns this key's signature over payload.
	SignPayload(payload []byte) ([]byte, error)
}
