package yuanbaotest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Codes sign-token answers (beyond 0, success, and RetryCode). The real service's codes for
// these refusals are not documented; these are the fake's.
const (
	RetryCode        = 10099 // "try again"
	CodeBadRequest   = 40000
	CodeUnknownApp   = 40001
	CodeBadTimestamp = 40002
	CodeBadSignature = 40003
	CodeRateLimited  = 42900 // answered with HTTP 429: more tokens than the sign limit allows
)

// DefaultSignLimit is how many tokens sign-token issues per app_key within DefaultSignWindow.
// Yuanbao does not document its limit; the fake's is tight enough that a client signing on
// every reconnect meets it, and loose enough for one that caches its token until it expires.
const (
	DefaultSignLimit  = 5
	DefaultSignWindow = time.Minute
)

// TimestampLayout is the format sign-token requires: Beijing time (offset +08:00), seconds.
const TimestampLayout = "2006-01-02T15:04:05-07:00"

// Beijing is the time zone of sign-token timestamps.
var Beijing = time.FixedZone("UTC+8", 8*3600)

// SignRequest is one sign-token request as received, and the code the fake answered.
type SignRequest struct {
	Header http.Header
	Body   []byte
	AppKey string
	At     time.Time
	Status int // HTTP status answered
	Code   int // answer code (0: success)
	Token  string
}

// SignFault is a scripted answer for the next sign-token request.
type SignFault struct {
	Code   int           // answer this code with HTTP 200 (RetryCode, or any refusal)
	Msg    string        // its msg
	Status int           // or answer this HTTP status with an HTML body
	Delay  time.Duration // answer (normally, unless Code or Status is set) after this long
}

// FailSign queues faults for the next sign-token requests, in order.
func (s *Server) FailSign(faults ...SignFault) {
	s.mu.Lock()
	s.signFaults = append(s.signFaults, faults...)
	s.mu.Unlock()
}

// SignRequests returns the sign-token requests received so far.
func (s *Server) SignRequests() []SignRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SignRequest(nil), s.signs...)
}

// Signature computes what a client must send: hex HMAC-SHA256 keyed with the secret over
// nonce + timestamp + appKey + secret.
func Signature(nonce, timestamp, appKey, secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(nonce + timestamp + appKey + secret))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) serveSign(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	rec := SignRequest{Header: r.Header.Clone(), Body: body, At: s.clock()}
	var req struct {
		AppKey    string `json:"app_key"`
		Nonce     string `json:"nonce"`
		Signature string `json:"signature"`
		Timestamp string `json:"timestamp"`
	}
	parseErr := json.Unmarshal(body, &req)
	rec.AppKey = req.AppKey
	s.mu.Lock()
	var fault *SignFault
	if len(s.signFaults) > 0 {
		f := s.signFaults[0]
		s.signFaults = s.signFaults[1:]
		fault = &f
	}
	s.mu.Unlock()
	answer := func(status, code int, msg string, data any) {
		rec.Status, rec.Code = status, code
		s.mu.Lock()
		s.signs = append(s.signs, rec)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		out := map[string]any{"code": code, "msg": msg}
		if data != nil {
			out["data"] = data
		}
		json.NewEncoder(w).Encode(out)
	}
	if fault != nil {
		if fault.Delay > 0 {
			select {
			case <-time.After(fault.Delay):
			case <-r.Context().Done():
				return
			}
		}
		switch {
		case fault.Status != 0:
			rec.Status = fault.Status
			s.mu.Lock()
			s.signs = append(s.signs, rec)
			s.mu.Unlock()
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(fault.Status)
			io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>")
			return
		case fault.Code != 0:
			answer(200, fault.Code, fault.Msg, nil)
			return
		}
	}
	if r.Method != http.MethodPost || parseErr != nil || req.AppKey == "" || req.Signature == "" {
		answer(200, CodeBadRequest, "bad request: want a JSON POST with app_key, nonce, signature, timestamp", nil)
		return
	}
	s.mu.Lock()
	b := s.botLocked(req.AppKey)
	s.mu.Unlock()
	if b == nil {
		answer(200, CodeUnknownApp, "unknown app_key", nil)
		return
	}
	ts, err := time.Parse(TimestampLayout, req.Timestamp)
	if _, offset := ts.Zone(); err != nil || offset != 8*3600 || req.Timestamp != ts.Format(TimestampLayout) {
		answer(200, CodeBadTimestamp, "timestamp must be Beijing time as 2006-01-02T15:04:05+08:00", nil)
		return
	}
	if d := rec.At.Sub(ts); d > s.skew || d < -s.skew {
		answer(200, CodeBadTimestamp, "timestamp too far from the server's clock", nil)
		return
	}
	if n, err := hex.DecodeString(req.Nonce); err != nil || len(n) != 16 {
		answer(200, CodeBadRequest, "nonce must be 32 hex digits", nil)
		return
	}
	want := Signature(req.Nonce, req.Timestamp, req.AppKey, b.secret)
	if !hmac.Equal([]byte(want), []byte(req.Signature)) {
		answer(200, CodeBadSignature, "signature mismatch", nil)
		return
	}
	var tb [16]byte
	rand.Read(tb[:])
	tok := "tok-" + hex.EncodeToString(tb[:])
	s.mu.Lock()
	limited := !b.takeSign(rec.At, s.signLimit, s.signWindow)
	if !limited {
		b.tokens[tok] = rec.At.Add(s.duration)
	}
	s.mu.Unlock()
	if limited {
		answer(http.StatusTooManyRequests, CodeRateLimited, fmt.Sprintf("sign-token rate limit: at most %d tokens per %v", s.signLimit, s.signWindow), nil)
		return
	}
	rec.Token = tok
	answer(200, 0, "ok", map[string]any{"token": tok, "bot_id": b.botID, "duration": int64(s.duration / time.Second),
		"product": "yuanbao", "source": "bot"})
}

// takeSign records a token issued at now unless limit tokens were issued in the window before
// it (a rolling window; limit 0 means no limit). s.mu must be held.
func (b *Bot) takeSign(now time.Time, limit int, window time.Duration) bool {
	if limit <= 0 {
		return true
	}
	kept := b.signed[:0]
	for _, at := range b.signed {
		if now.Sub(at) < window {
			kept = append(kept, at)
		}
	}
	b.signed = kept
	if len(b.signed) >= limit {
		return false
	}
	b.signed = append(b.signed, now)
	return true
}
