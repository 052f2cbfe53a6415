package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Request signing (Slack's v0 scheme): the signature is "v0=" + hex(HMAC-SHA256(signing secret,
// "v0:" + X-Slack-Request-Timestamp + ":" + raw body)).
const (
	headerSignature = "X-Slack-Signature"
	headerTimestamp = "X-Slack-Request-Timestamp"
	// signatureWindow is how far a request's timestamp may be from the host's clock, either way:
	// older requests may be replays, newer ones were made by someone with a wrong clock.
	signatureWindow = 5 * time.Minute
)

// Reasons a request fails verification. They are the text of the 401 answer and of the log line.
var (
	errMissingHeaders = errors.New("missing " + headerTimestamp + " or " + headerSignature)
	errBadTimestamp   = errors.New(headerTimestamp + " is not a Unix time")
	errStale          = errors.New(headerTimestamp + " is more than 5 minutes from now")
	errBadVersion     = errors.New(headerSignature + " is not a v0 signature")
	errBadHex         = errors.New(headerSignature + " is not 64 hex digits")
	errMismatch       = errors.New(headerSignature + " does not match the body")
)

// verify checks a request's signature at now. It never reports which part of a signature
// differs, and compares in constant time.
func verify(headers map[string][]string, body []byte, secret string, now time.Time) error {
	ts, okTS := header(headers, headerTimestamp)
	sig, okSig := header(headers, headerSignature)
	if !okTS || !okSig || ts == "" || sig == "" {
		return errMissingHeaders
	}
	if len(ts) > 12 || strings.TrimLeft(ts, "0123456789") != "" {
		return errBadTimestamp
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errBadTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > signatureWindow || d < -signatureWindow {
		return errStale
	}
	hexSig, ok := strings.CutPrefix(sig, "v0=")
	if !ok {
		return errBadVersion
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return errBadHex
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + ts + ":"))
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), got) {
		return errMismatch
	}
	return nil
}

// header returns the first value of the named header (case-insensitive) and whether it was sent.
func header(h map[string][]string, name string) (string, bool) {
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0], true
		}
	}
	return "", false
}
