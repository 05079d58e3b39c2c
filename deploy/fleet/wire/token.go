package wire

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// A join token is "ff1.<id>.<secret>.<ca>": a 6-character id (what the
// centre's Secret is named by), a 32-byte secret (hex), and the SHA-256 of
// the centre's CA certificate (hex, DER), which the member pins before it
// sends the secret anywhere.
const tokenPrefix = "ff1"

// Token is a parsed join token.
type Token struct {
	ID     string
	Secret string
	// CA is the hex SHA-256 of the centre's CA certificate (DER).
	CA string
}

var (
	reTokenID = regexp.MustCompile(`^[a-z0-9]{6}$`)
	reHex64   = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// ErrToken means a token is not one: wrong shape, not a credential.
var ErrToken = errors.New("not a fleet join token")

// NewToken makes a token for the CA whose certificate hashes to ca.
func NewToken(ca string) (Token, error) {
	id := make([]byte, 6)
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	buf := make([]byte, 6)
	if _, err := rand.Read(buf); err != nil {
		return Token{}, err
	}
	for i, b := range buf {
		id[i] = alphabet[int(b)%len(alphabet)]
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return Token{}, err
	}
	return Token{ID: string(id), Secret: hex.EncodeToString(secret), CA: ca}, nil
}

// ParseToken reads a token; the error says what is wrong with it, never
// repeating it.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] != tokenPrefix {
		return Token{}, fmt.Errorf("%w: it has the shape ff1.<id>.<secret>.<ca>", ErrToken)
	}
	t := Token{ID: parts[1], Secret: parts[2], CA: parts[3]}
	if !reTokenID.MatchString(t.ID) || !reHex64.MatchString(t.Secret) || !reHex64.MatchString(t.CA) {
		return Token{}, fmt.Errorf("%w: it has the shape ff1.<id>.<secret>.<ca> (a 6-character id, two 64-digit hex strings)", ErrToken)
	}
	return t, nil
}

func (t Token) String() string {
	return strings.Join([]string{tokenPrefix, t.ID, t.Secret, t.CA}, ".")
}

// Hash is what the centre keeps of a secret: its SHA-256, sha256:<hex>.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SameHash compares a secret with a kept hash in constant time.
func SameHash(secret, hash string) bool {
	return subtle.ConstantTimeCompare([]byte(Hash(secret)), []byte(hash)) == 1
}

// NewCredential makes a member's credential: "<member>.<secret>".
func NewCredential(member string) (string, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	return member + "." + hex.EncodeToString(secret), nil
}

// ParseCredential splits a credential into the member's name and its
// secret.
func ParseCredential(s string) (member, secret string, err error) {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || !reHex64.MatchString(s[i+1:]) || !ValidMemberName(s[:i]) {
		return "", "", errors.New("not a fleet member credential")
	}
	return s[:i], s[i+1:], nil
}

var reName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidMemberName tells whether name can name a Member (a DNS label).
func ValidMemberName(name string) bool {
	return len(name) <= 63 && reName.MatchString(name)
}

// centreDomains are the label prefixes a member may not ask for: the
// fleet's and ferry's own (fleet.ferry.dev/canary puts a member in every
// rollout's first wave) and those Kubernetes reserves.
var centreDomains = []string{"ferry.dev", "kubernetes.io", "k8s.io"}

// CentreLabel tells whether a label key is the centre's to give (a
// token's, or the Member's own labels at the centre) and not a member's
// to ask for: its prefix is one of ferry's or Kubernetes' domains, or
// under one (node-role.kubernetes.io/…).
func CentreLabel(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range centreDomains {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}
