package session

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewSessionID returns a physical session id for a session started at t: the UTC time as
// YYYYMMDD_HHMMSS, an underscore and 8 hex digits from crypto/rand, e.g. 20261129_080512_ab12cd34.
func NewSessionID(t time.Time) string {
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic("session: crypto/rand failed: " + err.Error()) // documented never to fail
	}
	b := make([]byte, 0, 24)
	b = t.UTC().AppendFormat(b, "20060102_150405")
	b = append(b, '_')
	b = hex.AppendEncode(b, r[:])
	return string(b)
}

// ValidSessionID reports whether s has the shape of a physical session id: 8 digits, an
// underscore, 6 digits, an underscore and 6 to 12 lowercase hex digits (the Python gateway used
// 6, 8 and 12). Anything else, notably anything with a path separator, is not an id.
func ValidSessionID(s string) bool {
	if len(s) < 22 || len(s) > 28 || s[8] != '_' || s[15] != '_' {
		return false
	}
	for i := 0; i < 15; i++ {
		if i == 8 {
			continue
		}
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	for i := 16; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
