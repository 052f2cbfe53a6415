package slacktest

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Headers of a signed Events API request.
const (
	HeaderSignature   = "X-Slack-Signature"
	HeaderTimestamp   = "X-Slack-Request-Timestamp"
	HeaderRetryNum    = "X-Slack-Retry-Num"
	HeaderRetryReason = "X-Slack-Retry-Reason"
	HeaderNoRetry     = "X-Slack-No-Retry"
)

// Signature is Slack's v0 request signature of body sent at timestamp (Unix seconds):
// "v0=" + hex(HMAC-SHA256(secret, "v0:" + timestamp + ":" + body)).
func Signature(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + timestamp + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// SetRequestURL sets the Events API Request URL (the app's /hooks/slack/{profile}) and starts
// delivering queued and new events there, unless Socket Mode is on. "" stops new deliveries.
func (s *Server) SetRequestURL(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requestURL = u
	s.routeLocked()
}

// Deliveries returns the delivery attempts of eventID ("" for every event), oldest first.
func (s *Server) Deliveries(eventID string) []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Delivery
	for _, d := range s.deliveries {
		if eventID == "" || d.EventID == eventID {
			out = append(out, d)
		}
	}
	return out
}

// deliverHTTP delivers p to the Request URL: an attempt, then Slack's retries (with
// X-Slack-Retry-Num and X-Slack-Retry-Reason) while the app does not acknowledge it within the
// ack timeout with a 2xx, unless it answers with X-Slack-No-Retry: 1.
func (s *Server) deliverHTTP(p *pending) {
	defer s.workers.Done()
	reason := ""
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		target := s.requestURL
		s.mu.Unlock()
		if target == "" || s.ctx.Err() != nil {
			s.mu.Lock()
			p.started = false
			s.queue = append(s.queue, p)
			s.mu.Unlock()
			return
		}
		d := s.attempt(target, p.id, p.body, attempt, reason, nil)
		s.mu.Lock()
		s.deliveries = append(s.deliveries, d)
		final := d.OK() || d.NoRetry || attempt >= len(s.cfg.retries)
		if d.OK() {
			p.acked = true
		} else if final {
			p.gaveUp = true
		}
		s.changedLocked()
		s.mu.Unlock()
		if final {
			return
		}
		reason = retryReason(d)
		if !s.sleep(s.ctx, s.cfg.retries[attempt]) {
			return
		}
	}
}

// retryReason names why an attempt failed, as X-Slack-Retry-Reason does.
func retryReason(d Delivery) string {
	switch {
	case d.Status != 0:
		return "http_error"
	case strings.Contains(d.Err, "timeout"):
		return "http_timeout"
	case strings.Contains(d.Err, "connection refused"), strings.Contains(d.Err, "dial"):
		return "connection_failed"
	}
	return "unknown_error"
}

// tamper changes a request before it is sent (for Forge).
type tamper func(h http.Header, body *[]byte)

// attempt POSTs body to target once, signed at the clock's now, and records the outcome.
func (s *Server) attempt(target, eventID string, body []byte, attempt int, reason string, t tamper) Delivery {
	now := s.cfg.clock.Now()
	d := Delivery{EventID: eventID, Attempt: attempt, Reason: reason, Time: now}
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, Signature(s.cfg.signing, ts, body))
	if attempt > 0 {
		h.Set(HeaderRetryNum, strconv.Itoa(attempt))
		h.Set(HeaderRetryReason, reason)
	}
	if t != nil {
		body = append([]byte(nil), body...)
		t(h, &body)
	}
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		d.Err = err.Error()
		return d
	}
	req.Header = h
	start := time.Now()
	resp, err := s.hook.Do(req)
	d.Took = time.Since(start)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			d.Err = fmt.Sprintf("no answer within %v (timeout)", s.cfg.ackTimeout)
		} else {
			d.Err = err.Error()
		}
		return d
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	d.Status, d.Body = resp.StatusCode, string(head)
	d.NoRetry = resp.Header.Get(HeaderNoRetry) == "1"
	return d
}

// Retry sends the already-queued event eventID to the Request URL again, as Slack does when it
// did not see the app's acknowledgement in time (whatever the app answered): X-Slack-Retry-Num is
// the next attempt number and X-Slack-Retry-Reason is reason ("http_timeout" when empty). It
// returns the attempt's outcome.
func (s *Server) Retry(eventID, reason string) (Delivery, error) {
	s.mu.Lock()
	p, target := s.envelopes[eventID], s.requestURL
	n := 0
	for _, d := range s.deliveries {
		if d.EventID == eventID {
			n++
		}
	}
	s.mu.Unlock()
	if p == nil {
		return Delivery{}, fmt.Errorf("slacktest: no event %s", eventID)
	}
	if target == "" {
		return Delivery{}, errors.New("slacktest: no Request URL set")
	}
	if reason == "" {
		reason = "http_timeout"
	}
	d := s.attempt(target, eventID, p.body, max(n, 1), reason, nil)
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	if d.OK() {
		p.acked = true
	}
	s.changedLocked()
	s.mu.Unlock()
	return d, nil
}

// Forgery is a request that must be refused: what a forger (or a broken proxy) sends instead of
// Slack's signed request.
type Forgery int

// Forgeries the fake can send.
const (
	ForgeBadSignature    Forgery = iota // v0= and 64 hex digits that are not the HMAC
	ForgeBadHex                         // v0= followed by something that is not hex
	ForgeShortHex                       // v0= and a truncated HMAC (valid hex, 16 bytes)
	ForgeWrongVersion                   // v1= with the right HMAC
	ForgeWrongSecret                    // a proper v0 signature made with another secret
	ForgeStale                          // signed correctly, timestamp 6 minutes old
	ForgeFuture                         // signed correctly, timestamp 6 minutes ahead
	ForgeBadTimestamp                   // a timestamp that is not a number, signed over it
	ForgeNoSignature                    // no X-Slack-Signature
	ForgeNoTimestamp                    // no X-Slack-Request-Timestamp
	ForgeNoHeaders                      // neither header
	ForgeAlteredBody                    // signed, then the body changed (a byte of the text)
	ForgeReplayOtherBody                // a valid signature of another body at the same timestamp
)

// Forgeries lists every Forgery.
func Forgeries() []Forgery {
	var out []Forgery
	for f := ForgeBadSignature; f <= ForgeReplayOtherBody; f++ {
		out = append(out, f)
	}
	return out
}

// String names the forgery.
func (f Forgery) String() string {
	return [...]string{"bad signature", "bad hex", "short signature", "wrong version", "wrong secret",
		"stale timestamp", "future timestamp", "non-numeric timestamp", "missing signature",
		"missing timestamp", "missing headers", "body altered after signing", "signature of another body"}[f]
}

// Forge sends env to the Request URL once (never retried), tampered with as f says, and returns
// the outcome. The event is not queued: a receiver that accepts it has accepted a forgery.
func (s *Server) Forge(f Forgery, env *Envelope) (Delivery, error) {
	s.mu.Lock()
	target := s.requestURL
	s.mu.Unlock()
	if target == "" {
		return Delivery{}, errors.New("slacktest: no Request URL set")
	}
	d := s.attempt(target, env.EventID, marshal(env), 0, "", s.forgeTamper(f))
	d.Reason = "forgery: " + f.String()
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.changedLocked()
	s.mu.Unlock()
	return d, nil
}

// forgeTamper is the change f makes to a signed request.
func (s *Server) forgeTamper(f Forgery) tamper {
	secret := s.cfg.signing
	resign := func(h http.Header, ts string, b []byte) {
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, Signature(secret, ts, b))
	}
	return func(h http.Header, b *[]byte) {
		now := s.cfg.clock.Now()
		switch f {
		case ForgeBadSignature:
			sig := []byte(h.Get(HeaderSignature))
			sig[len(sig)-1] ^= 1 // still hex: '0'..'9' and 'a'..'f' flip to other hex digits
			if c := sig[len(sig)-1]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				sig[len(sig)-1] = '0'
			}
			h.Set(HeaderSignature, string(sig))
		case ForgeBadHex:
			h.Set(HeaderSignature, "v0=zz"+strings.Repeat("g", 62))
		case ForgeShortHex:
			h.Set(HeaderSignature, h.Get(HeaderSignature)[:3+32])
		case ForgeWrongVersion:
			h.Set(HeaderSignature, "v1="+strings.TrimPrefix(h.Get(HeaderSignature), "v0="))
		case ForgeWrongSecret:
			h.Set(HeaderSignature, Signature(secret+"-not", h.Get(HeaderTimestamp), *b))
		case ForgeStale:
			resign(h, strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10), *b)
		case ForgeFuture:
			resign(h, strconv.FormatInt(now.Add(6*time.Minute).Unix(), 10), *b)
		case ForgeBadTimestamp:
			resign(h, "yesterday", *b)
		case ForgeNoSignature:
			h.Del(HeaderSignature)
		case ForgeNoTimestamp:
			h.Del(HeaderTimestamp)
		case ForgeNoHeaders:
			h.Del(HeaderSignature)
			h.Del(HeaderTimestamp)
		case ForgeAlteredBody:
			*b = alter(*b, 'X')
		case ForgeReplayOtherBody:
			h.Set(HeaderSignature, Signature(secret, h.Get(HeaderTimestamp), alter(*b, 'Y')))
		}
	}
}

// alter changes a body after signing: the first event id (or, in an interactivity form, a
// character of the payload) gets c in front.
func alter(b []byte, c byte) []byte {
	if i := bytes.Index(b, []byte(`"event_id":"`)); i >= 0 {
		return bytes.Replace(b, []byte(`"event_id":"`), []byte(`"event_id":"`+string(c)), 1)
	}
	out := append([]byte(nil), b...)
	if i := bytes.Index(out, []byte("block_actions")); i >= 0 {
		out[i] = c // "Xlock_actions"
	} else if len(out) > 0 {
		out[len(out)-1] ^= 1
	}
	return out
}

// VerifyURL sends the url_verification challenge to the Request URL, signed, as Slack does
// when the URL is saved, and reports whether the answer carried the challenge back (as the plain
// body, a JSON {"challenge"} or a form challenge=...).
func (s *Server) VerifyURL() (Delivery, error) {
	s.mu.Lock()
	target := s.requestURL
	s.mu.Unlock()
	if target == "" {
		return Delivery{}, errors.New("slacktest: no Request URL set")
	}
	var nonce [24]byte
	rand.Read(nonce[:])
	challenge := hex.EncodeToString(nonce[:])
	body := marshal(URLVerification{Token: VerificationToken, Challenge: challenge, Type: "url_verification"})
	d := s.attempt(target, "", body, 0, "", nil)
	d.Reason = "url_verification"
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.changedLocked()
	s.mu.Unlock()
	if !d.OK() {
		return d, fmt.Errorf("url_verification answered %d %s", d.Status, d.Err)
	}
	got := strings.TrimSpace(d.Body)
	var j struct {
		Challenge string `json:"challenge"`
	}
	form, _ := url.ParseQuery(got)
	if got == challenge || (json.Unmarshal([]byte(got), &j) == nil && j.Challenge == challenge) || form.Get("challenge") == challenge {
		return d, nil
	}
	return d, fmt.Errorf("url_verification: the answer %q does not carry the challenge", d.Body)
}
