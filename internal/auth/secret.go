package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// SecretPrefix starts every key NewSecret makes, so that secret scanners
// and people can tell one.
const SecretPrefix = "irk-"

// Hash is a key's SHA-256.
type Hash [sha256.Size]byte

// hashPrefix starts a hash as the keys file writes it.
const hashPrefix = "sha256:"

// HashOf returns the hash of a secret. It allocates nothing for a secret
// of up to MaxTokenBytes, the longest a request may send.
func HashOf(secret string) Hash {
	var buf [MaxTokenBytes]byte
	if len(secret) <= len(buf) {
		return sha256.Sum256(buf[:copy(buf[:], secret)])
	}
	return sha256.Sum256([]byte(secret))
}

// String writes the hash as the keys file does: sha256:<64 hex digits>.
func (h Hash) String() string { return hashPrefix + hex.EncodeToString(h[:]) }

var errHashForm = errors.New("must be sha256: and 64 hex digits, as inferrail-gateway keygen prints it")

// ParseHash reads a hash as String writes it (hex digits in either case).
func ParseHash(s string) (Hash, error) {
	var h Hash
	hexits, ok := strings.CutPrefix(s, hashPrefix)
	if !ok || len(hexits) != 2*len(h) {
		return h, errHashForm
	}
	if _, err := hex.Decode(h[:], []byte(hexits)); err != nil {
		return h, errHashForm
	}
	return h, nil
}

// NewSecret makes a new key from 256 random bits and returns it with its
// hash.
func NewSecret() (secret string, h Hash) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, HashOf(secret)
}
