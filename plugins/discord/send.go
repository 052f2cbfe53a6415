package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// MaxContent is Discord's limit on a message's content. The manifest declares it in UTF-16 code
// units, which are never fewer than the characters Discord counts, so a part the host splits
// always fits.
const MaxContent = 2000

// defaultRetryAfter is the wait assumed when a 429 says nothing usable.
const defaultRetryAfter = 5 * time.Second

// rlKey holds the route buckets send found exhausted and the global limit (unix ms they reset).
const rlKey = "rl"

// noMentions is allowed_mentions that lets nothing in the text notify anyone: the agent's
// output (a process's output included) may contain @everyone, @here, <@user> or <@&role>.
var noMentions = map[string]any{"parse": []string{}, "replied_user": false}

// send transmits one message, edit or typing indicator. It never sleeps or retries: a message
// whose answer was lost after the request was written is SendUncertain (a resend could post it
// twice), and a route bucket known to be exhausted is answered retryable without a request.
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return failed(abi.SendPermanent, "bad_config", strings.Join(p, "; ")), nil
	}
	a := newAPI(c, cfg)
	channel := msg.ChatID
	if msg.ThreadID != "" {
		channel = msg.ThreadID // a thread is a channel of its own
	}
	if !snowflake(channel) {
		return failed(abi.SendPermanent, "bad_chat_id", fmt.Sprintf("%q is not a Discord channel id", channel)), nil
	}
	switch {
	case msg.Action == "typing":
		r, err := a.call("POST", "/channels/"+channel+"/typing", nil)
		if res := idempotentFailure("typing", r, err); res != nil {
			return res, nil
		}
		return &abi.SendResult{}, nil
	case msg.Action != "":
		return failed(abi.SendPermanent, "unsupported_action", "chat action "+strconv.Quote(msg.Action)+" is not supported"), nil
	case strings.TrimSpace(msg.Text) == "":
		return failed(abi.SendPermanent, "empty_text", "Discord refuses empty messages; not sent"), nil
	case len(utf16.Encode([]rune(msg.Text))) > MaxContent:
		return failed(abi.SendPermanent, "message_too_long", fmt.Sprintf("the text exceeds Discord's %d characters; not sent", MaxContent)), nil
	case msg.EditMessageID != "":
		if !snowflake(msg.EditMessageID) {
			return failed(abi.SendPermanent, "bad_message_id", fmt.Sprintf("%q is not a Discord message id", msg.EditMessageID)), nil
		}
		r, err := a.call("PATCH", "/channels/"+channel+"/messages/"+msg.EditMessageID,
			map[string]any{"content": msg.Text, "allowed_mentions": noMentions})
		if res := idempotentFailure("edit", r, err); res != nil {
			return res, nil
		}
		return &abi.SendResult{MessageIDs: []string{msg.EditMessageID}}, nil
	}
	now := time.Now()
	if t, err := c.Now(); err == nil {
		now = t
	}
	limits := loadLimits(c)
	if wait, why := limits.wait(channel, now); wait > 0 {
		res := failed(abi.SendRetryable, "rate_limited", why+"; not sent")
		res.Error.RetryAfterMs = ceilMs(wait)
		return res, nil
	}
	body := map[string]any{"content": msg.Text, "allowed_mentions": noMentions}
	if msg.ReplyTo != "" && snowflake(msg.ReplyTo) {
		body["message_reference"] = map[string]any{"message_id": msg.ReplyTo, "fail_if_not_exists": false}
	}
	if n := nonce(msg); n != "" {
		// Discord drops a second message with the same nonce for a few minutes: a safety net
		// under the host's own rule never to resend an uncertain message.
		body["nonce"], body["enforce_nonce"] = n, true
	}
	r, err := a.call("POST", "/channels/"+channel+"/messages", body)
	if r != nil {
		// Reset-After counts from the answer, not from the request: on a slow round trip the
		// bucket resets that much later than the request's start would say.
		answered := time.Now()
		if t, err := c.Now(); err == nil {
			answered = t
		}
		limits.note(c, channel, r, answered)
	}
	if res := postFailure(r, err); res != nil {
		return res, nil
	}
	var posted struct {
		ID string `json:"id"`
	}
	json.Unmarshal(r.Body, &posted)
	if posted.ID == "" {
		return &abi.SendResult{}, nil // posted (a 2xx), its id unreadable
	}
	return &abi.SendResult{MessageIDs: []string{posted.ID}}, nil
}

// snowflake reports whether s looks like a Discord id.
func snowflake(s string) bool {
	if len(s) == 0 || len(s) > 20 {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// nonce is the message's idempotency key for Discord (at most 25 characters), from the host's
// delivery id and the part.
func nonce(msg *abi.OutboundMessage) string {
	if msg.DeliveryID == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(msg.DeliveryID + ":" + strconv.Itoa(msg.Part)))
	return "h" + hex.EncodeToString(sum[:12])
}

// postFailure maps a failed message creation to a typed send failure, or returns nil on
// success. Whatever may mean "posted" is SendUncertain (never resent; SPEC §2.6):
//   - transport: uncertain (written, no complete answer) and too_large are uncertain; io and
//     timeout (nothing written) retryable; denied and bad_request permanent;
//   - 429 (a route bucket, or the global limit): retryable after retry_after;
//   - 5xx: uncertain (Discord's front end may have passed the request on);
//   - any other non-2xx: a refusal, permanent, with Discord's error code.
func postFailure(r *reply, err error) *abi.SendResult {
	if err != nil {
		e := abi.AsError(err)
		switch e.Code {
		case abi.CodeUncertain, abi.CodeTooLarge:
			return failed(abi.SendUncertain, abi.CodeUncertain, "create message: "+e.Message+"; it may have been posted")
		case abi.CodeDenied, abi.CodeBadRequest, abi.CodeUnsupported:
			return failed(abi.SendPermanent, e.Code, e.Message)
		}
		return failed(abi.SendRetryable, e.Code, "not sent: "+e.Message)
	}
	switch {
	case r.ok():
		return nil
	case r.Status == 429:
		return rateLimited(r)
	case r.Status >= 500:
		return failed(abi.SendUncertain, "server_error", "create message: "+r.describe()+"; it may have been posted")
	}
	return refusal(r)
}

// idempotentFailure maps a failed edit or typing indicator, which are harmless to repeat:
// anything but a refusal is retryable.
func idempotentFailure(what string, r *reply, err error) *abi.SendResult {
	if err != nil {
		e := abi.AsError(err)
		if e.Code == abi.CodeDenied || e.Code == abi.CodeBadRequest {
			return failed(abi.SendPermanent, e.Code, e.Message)
		}
		return failed(abi.SendRetryable, e.Code, what+": "+e.Message)
	}
	switch {
	case r.ok():
		return nil
	case r.Status == 429:
		return rateLimited(r)
	case r.Status >= 500:
		return failed(abi.SendRetryable, "server_error", what+": "+r.describe())
	}
	return refusal(r)
}

func rateLimited(r *reply) *abi.SendResult {
	scope := "the route's bucket"
	if r.global() {
		scope = "the global limit"
	}
	res := failed(abi.SendRetryable, "rate_limited", "Discord rate limited the request ("+scope+"); not sent")
	res.Error.RetryAfterMs = ceilMs(r.retryAfter())
	return res
}

// refusal is a permanent failure with Discord's error: 401 the token, 403 a missing access or
// permission (50001, 50013), 404 an unknown channel or message (10003, 10008), 400 a form error.
func refusal(r *reply) *abi.SendResult {
	code := "http_" + strconv.Itoa(r.Status)
	switch r.Status {
	case 401:
		code = "unauthorized"
	case 403:
		code = "forbidden"
	case 404:
		code = "not_found"
	}
	if r.JSON && r.Code != 0 {
		code += "_" + strconv.Itoa(r.Code)
	}
	return failed(abi.SendPermanent, code, r.describe())
}

func failed(kind, code, message string) *abi.SendResult {
	return &abi.SendResult{Error: &abi.SendError{Kind: kind, Code: code, Message: message}}
}

// limits are the route buckets known to be exhausted, and the global limit, as unix ms when
// they reset (kv "rl"). Concurrent sends may overwrite each other's notes: the worst a lost note
// costs is one request that Discord answers 429, which is mapped the same way.
type limits struct {
	Routes map[string]int64 `json:"routes,omitempty"`
	Global int64            `json:"global,omitempty"`
}

func loadLimits(c *sdk.Context) *limits {
	l := &limits{}
	if raw, found, err := c.KVGet(rlKey); err == nil && found {
		json.Unmarshal(raw, l)
	}
	return l
}

// wait is how long a message to channel must wait before its request may be made.
func (l *limits) wait(channel string, now time.Time) (time.Duration, string) {
	if d := time.UnixMilli(l.Global).Sub(now); d > 0 {
		return d, "Discord's global rate limit holds every request"
	}
	if d := time.UnixMilli(l.Routes[channel]).Sub(now); d > 0 {
		return d, "the channel's message bucket is exhausted (X-RateLimit-Remaining: 0)"
	}
	return 0, ""
}

// note records what an answer says of the bucket: exhausted until its reset, or the global
// limit after a global 429.
func (l *limits) note(c *sdk.Context, channel string, r *reply, now time.Time) {
	changed := false
	nowMs := now.UnixMilli()
	for k, at := range l.Routes {
		if at <= nowMs {
			delete(l.Routes, k)
			changed = true
		}
	}
	if r.Status == 429 && r.global() {
		l.Global, changed = now.Add(r.retryAfter()).UnixMilli(), true
	} else if rem, ok := header(r.Headers, "X-RateLimit-Remaining"); ok && strings.TrimSpace(rem) == "0" {
		after, ok := seconds(r.Headers, "X-RateLimit-Reset-After")
		if r.Status == 429 {
			after, ok = r.retryAfter(), true
		}
		if ok && after > 0 {
			if l.Routes == nil {
				l.Routes = map[string]int64{}
			}
			l.Routes[channel], changed = now.Add(after).UnixMilli(), true
		}
	} else if _, had := l.Routes[channel]; had {
		delete(l.Routes, channel)
		changed = true
	}
	if changed {
		raw, _ := json.Marshal(l)
		c.KVSet(rlKey, raw)
	}
}

// ceilMs is d in whole milliseconds, rounded up: a caller that waits retry_after_ms must find the
// bucket reset, not a fraction of a millisecond short of it.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
