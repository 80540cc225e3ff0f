package pgstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// Keys and groups are kept for any bytes and any length: a
// key that a text column cannot hold (not UTF-8, a NUL byte) or an index
// entry cannot fit is stored as its digest, and in full in key_bytes
// (group_bytes) for the handler (migration 009).
const (
	// maxPlainKey is the longest key stored as it is: with the queue's
	// name, its index entries stay well below the B-tree's limit of
	// about 2 700 bytes.
	maxPlainKey = 1024
	// digestMark starts a stored digest. A key that starts with it is
	// stored as a digest too, so that no key is stored as another's
	// digest.
	digestMark = "#sha256:"
)

// storeKey returns how key (or a group) is stored: the text the indexes
// and comparisons use and, for a key stored as its digest, its bytes
// (nil otherwise). Only the first check runs for an ordinary key.
func storeKey(key string) (text string, raw []byte) {
	if len(key) <= maxPlainKey && utf8.ValidString(key) && strings.IndexByte(key, 0) < 0 &&
		!strings.HasPrefix(key, digestMark) {
		return key, nil
	}
	sum := sha256.Sum256([]byte(key))
	return digestMark + hex.EncodeToString(sum[:]), []byte(key)
}

// storedKey is storeKey's text alone, for lookups.
func storedKey(key string) string {
	text, _ := storeKey(key)
	return text
}

// loadKey returns the key stored as text and raw (storeKey).
func loadKey(text string, raw []byte) string {
	if raw != nil {
		return string(raw)
	}
	return text
}
