package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// API key tokens are "rqk_<id>_<secret>": id is 8 random bytes in hex,
// the key's public name in listings, audit lines and errors; secret is
// 32 random bytes, base64url. The meta state keeps the SHA-256 of the
// secret only: the secret has 256 bits of entropy, so a slow password hash
// would protect nothing more and would cost every call.
const tokenPrefix = "rqk_"

// errMalformedToken: a bearer token that is not an API key.
var errMalformedToken = errors.New("the API key is malformed: want rqk_<id>_<secret>, as raftq keys create printed it")

// newAPIKey returns a new key id, its token and the SHA-256 of its secret.
func newAPIKey() (id, token string, sum [32]byte, err error) {
	var idb [8]byte
	var secret [32]byte
	if _, err = rand.Read(idb[:]); err != nil {
		return "", "", sum, err
	}
	if _, err = rand.Read(secret[:]); err != nil {
		return "", "", sum, err
	}
	id = hex.EncodeToString(idb[:])
	s := base64.RawURLEncoding.EncodeToString(secret[:])
	return id, tokenPrefix + id + "_" + s, sha256.Sum256([]byte(s)), nil
}

// parseToken splits a token into its key id and the SHA-256 of its
// secret.
func parseToken(token string) (id string, sum [32]byte, err error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", sum, errMalformedToken
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(secret) != 43 {
		return "", sum, errMalformedToken
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", sum, errMalformedToken
	}
	return id, sha256.Sum256([]byte(secret)), nil
}
