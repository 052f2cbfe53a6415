package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Text limits. Slack truncates a message's text beyond MaxText characters. The manifest asks
// the host to split at ManifestLimit, leaving room for the escaping of & < > (which lengthens
// the text); a text that still exceeds MaxText once escaped is split again here.
const (
	MaxText       = 40000
	ManifestLimit = 39000
)

// defaultRetryAfter is the wait assumed when a 429 has no usable Retry-After.
const defaultRetryAfter = 30 * time.Second

// typingStatus is what an assistant thread shows while the agent works.
const typingStatus = "is thinking…"

// postParams are chat.postMessage's parameters. Text is sent as plain text with & < > escaped,
// so that what the agent wrote is what the user sees (no accidental @channel or links).
type postParams struct {
	Channel  string  `json:"channel"`
	Text     string  `json:"text"`
	ThreadTS string  `json:"thread_ts,omitempty"`
	Blocks   []block `json:"blocks,omitempty"`
}

// send transmits one message, edit or typing status. It never sleeps or retries, except once at
// the top level when Slack answers cannot_reply_to_message (the thread's root cannot carry
// replies). A message whose answer was lost after it was sent is SendUncertain: Slack has no
// idempotency key, and a resend could post it twice.
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return failed(abi.SendPermanent, "bad_config", strings.Join(p, "; ")), nil
	}
	a := newAPI(c, cfg)
	token := cfg.tokenFor(msg.ScopeID)
	switch {
	case msg.Action != "":
		return sendAction(a, token, msg), nil
	case len(msg.Attachments) > 0:
		return sendFile(c, a, token, msg), nil
	case strings.TrimSpace(msg.Text) == "":
		return failed(abi.SendPermanent, "no_text", "Slack refuses empty messages; not sent"), nil
	case msg.EditMessageID != "":
		return update(c, a, token, msg), nil
	}
	var ids []string
	parts := splitRaw(msg.Text, MaxText)
	for i, raw := range parts {
		p := postParams{Channel: msg.ChatID, Text: escape(raw), ThreadTS: msg.ThreadID}
		if i == len(parts)-1 && len(msg.Buttons) > 0 {
			p.Blocks = buttonBlocks(raw, msg.Buttons) // the buttons go under the last part
		}
		r, err := a.call("chat.postMessage", token, p)
		if err == nil && !r.OK && r.JSON && r.Error == "cannot_reply_to_message" && p.ThreadTS != "" {
			c.Log(abi.LevelWarn, "the thread's root cannot take replies; posting at the top level",
				"channel", msg.ChatID, "thread_ts", msg.ThreadID)
			p.ThreadTS = ""
			r, err = a.call("chat.postMessage", token, p)
		}
		if res := postFailure("chat.postMessage", r, err, token); res != nil {
			res.Error.Accepted = ids
			return res, nil
		}
		if ts := postedTS(r); ts != "" {
			ids = append(ids, ts)
			if len(p.Blocks) > 0 {
				remember(c, msg.ChatID, ts)
			}
		}
	}
	return &abi.SendResult{MessageIDs: ids}, nil
}

// postedTS reads the ts of a chat.postMessage answer ("" if unreadable: posted all the same).
func postedTS(r *reply) string {
	var m struct {
		TS string `json:"ts"`
	}
	json.Unmarshal(r.Body, &m)
	return m.TS
}

// What Slack's Web API errors say about the request (the table in RATIONALE.md, Slack).
var (
	// rateLimitErrors: refused for the rate; retry after Retry-After (HTTP 429, or an HTTP 200
	// whose body says so, which Slack sends with Retry-After too).
	rateLimitErrors = map[string]bool{"ratelimited": true, "rate_limited": true}
	// notExecuted: Slack documents the method as not run (the service unavailable, the POST
	// body missing or cut short, the workspace migrating): certainly not posted, retryable
	// whatever the HTTP status that carries them.
	notExecuted = map[string]bool{"service_unavailable": true, "request_timeout": true, "team_added_to_org": true}
	// partlyExecuted: Slack says "some aspect of the operation may have succeeded": the message
	// may be in the channel.
	partlyExecuted = map[string]bool{"fatal_error": true, "internal_error": true}
)

// postFailure maps a failed chat.postMessage (or files.completeUploadExternal, which shares a
// file into the chat: method names it) to a typed send failure, or returns nil on
// success. Whatever may mean "posted" is SendUncertain (never resent; SPEC §2.6):
//   - transport: uncertain (sent, no answer) and too_large (an answer came, too big to read)
//     are uncertain; io and timeout (nothing sent) retryable; denied and bad_request permanent;
//   - a Web API answer naming an error decides by the error, whatever the HTTP status:
//     ratelimited and rate_limited (or a 429) retryable after Retry-After; service_unavailable,
//     request_timeout and team_added_to_org retryable (after Retry-After if given);
//     fatal_error and internal_error uncertain; any other error at a 5xx uncertain (the front
//     end may have passed the request on); the rest permanent, with Slack's error code;
//   - HTTP 5xx without a Web API answer, or a 200 that is not one: uncertain (Slack may have
//     posted first); any other status without one permanent.
func postFailure(method string, r *reply, err error, token string) *abi.SendResult {
	if err != nil {
		e := abi.AsError(err)
		switch e.Code {
		case abi.CodeUncertain, abi.CodeTooLarge:
			return failed(abi.SendUncertain, abi.CodeUncertain, method+": "+e.Message)
		case abi.CodeDenied, abi.CodeBadRequest, abi.CodeUnsupported:
			return failed(abi.SendPermanent, e.Code, e.Message)
		}
		return failed(abi.SendRetryable, e.Code, e.Message)
	}
	if r.OK {
		return nil
	}
	desc := scrub(r.describe(), token)
	switch {
	case r.Status == 429 || (r.JSON && rateLimitErrors[r.Error]):
		return rateLimited(r, desc)
	case r.JSON && notExecuted[r.Error]:
		return notRun(r, r.Error, desc)
	case r.JSON && partlyExecuted[r.Error]:
		return failed(abi.SendUncertain, r.Error, method+": "+desc+"; Slack says part of it may have succeeded")
	case r.Status >= 500:
		return failed(abi.SendUncertain, "server_error", method+": "+desc+"; the message may have been posted")
	case r.Status == 200 && !r.JSON:
		return failed(abi.SendUncertain, "unreadable_answer", method+": "+desc+"; the message may have been posted")
	case !r.JSON:
		return failed(abi.SendPermanent, "http_"+strconv.Itoa(r.Status), desc)
	}
	return failed(abi.SendPermanent, r.Error, desc)
}

// rateLimited is a retryable failure after the answer's Retry-After (defaultRetryAfter
// without one).
func rateLimited(r *reply, desc string) *abi.SendResult {
	res := failed(abi.SendRetryable, "rate_limited", desc)
	wait := r.RetryAfter
	if wait <= 0 {
		wait = defaultRetryAfter
	}
	res.Error.RetryAfterMs = wait.Milliseconds()
	return res
}

// notRun is a retryable failure of a request Slack did not execute: after Retry-After when
// Slack gave one, else after the host's back-off.
func notRun(r *reply, code, desc string) *abi.SendResult {
	res := failed(abi.SendRetryable, code, desc)
	res.Error.RetryAfterMs = r.RetryAfter.Milliseconds()
	return res
}

// idempotentFailure maps a failed call that is safe to repeat (a status, an edit to the same
// text): anything but a refusal is retryable.
func idempotentFailure(method string, r *reply, err error, token string) *abi.SendResult {
	if err != nil {
		e := abi.AsError(err)
		if e.Code == abi.CodeDenied || e.Code == abi.CodeBadRequest {
			return failed(abi.SendPermanent, e.Code, e.Message)
		}
		return failed(abi.SendRetryable, e.Code, method+": "+e.Message)
	}
	if r.OK {
		return nil
	}
	desc := method + ": " + scrub(r.describe(), token)
	switch {
	case r.Status == 429 || (r.JSON && rateLimitErrors[r.Error]):
		return rateLimited(r, desc)
	case r.JSON && notExecuted[r.Error]:
		return notRun(r, r.Error, desc)
	case r.Status >= 500 || !r.JSON || partlyExecuted[r.Error]:
		return notRun(r, "server_error", desc)
	}
	return failed(abi.SendPermanent, r.Error, desc)
}

// sendAction shows "typing". Slack has a typing indicator for apps only in assistant threads
// (a DM thread): there it is assistant.threads.setStatus, which needs channel_id and thread_ts.
// Elsewhere there is nothing to show, and the action succeeds without a request.
func sendAction(a *api, token string, msg *abi.OutboundMessage) *abi.SendResult {
	if msg.Action != "typing" {
		return failed(abi.SendPermanent, "unsupported_action", "chat action "+strconv.Quote(msg.Action)+" is not supported")
	}
	if msg.ThreadID == "" || !strings.HasPrefix(msg.ChatID, "D") {
		return &abi.SendResult{}
	}
	p := struct {
		ChannelID string `json:"channel_id"`
		ThreadTS  string `json:"thread_ts"`
		Status    string `json:"status"`
	}{msg.ChatID, msg.ThreadID, typingStatus}
	r, err := a.call("assistant.threads.setStatus", token, p)
	if res := idempotentFailure("assistant.threads.setStatus", r, err, token); res != nil {
		return res
	}
	return &abi.SendResult{}
}

// update replaces a message's text with chat.update. Slack keeps a message's blocks when an
// update has none, and shows the blocks, not the text: a message posted with buttons is edited
// with blocks too, the new text's sections and the buttons asked for, if any (none: the buttons
// go, as after an approval).
func update(c *sdk.Context, a *api, token string, msg *abi.OutboundMessage) *abi.SendResult {
	text := escape(msg.Text)
	if utf8.RuneCountInString(text) > MaxText {
		return failed(abi.SendPermanent, "msg_too_long", "the edited text exceeds Slack's "+strconv.Itoa(MaxText)+" characters; not sent")
	}
	p := struct {
		Channel string  `json:"channel"`
		TS      string  `json:"ts"`
		Text    string  `json:"text"`
		Blocks  []block `json:"blocks,omitempty"`
	}{msg.ChatID, msg.EditMessageID, text, nil}
	if len(msg.Buttons) > 0 || hasBlocks(c, msg.ChatID, msg.EditMessageID) {
		p.Blocks = buttonBlocks(msg.Text, msg.Buttons)
	}
	r, err := a.call("chat.update", token, p)
	if res := idempotentFailure("chat.update", r, err, token); res != nil {
		return res
	}
	if len(p.Blocks) > 0 {
		remember(c, msg.ChatID, msg.EditMessageID)
	}
	return &abi.SendResult{MessageIDs: []string{msg.EditMessageID}}
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// escape makes text plain for Slack: & < > become entities, as Slack asks.
func escape(text string) string { return escaper.Replace(text) }

// escapedLen is the length of r once escaped, in characters.
func escapedLen(r rune) int {
	switch r {
	case '&':
		return 5
	case '<', '>':
		return 4
	}
	return 1
}

// splitEscaped escapes text and cuts it into pieces of at most limit characters, never inside an
// entity, preferring a line break (then a space) in the second half of a piece.
func splitEscaped(text string, limit int) []string {
	out := splitRaw(text, limit)
	for i := range out {
		out[i] = escape(out[i])
	}
	return out
}

// splitRaw cuts text into the pieces splitEscaped escapes: each at most limit characters once
// escaped.
func splitRaw(text string, limit int) []string {
	var out []string
	for text != "" {
		n, end := 0, len(text)
		lastNL, lastSpace := -1, -1
		for i, r := range text {
			w := escapedLen(r)
			if n+w > limit {
				end = i
				break
			}
			n += w
			if n > limit/2 {
				switch r {
				case '\n':
					lastNL = i + 1
				case ' ':
					lastSpace = i + 1
				}
			}
		}
		if end < len(text) {
			switch {
			case lastNL > 0:
				end = lastNL
			case lastSpace > 0:
				end = lastSpace
			}
		}
		out = append(out, text[:end])
		text = text[end:]
	}
	return out
}

func failed(kind, code, message string) *abi.SendResult {
	return &abi.SendResult{Error: &abi.SendError{Kind: kind, Code: code, Message: message}}
}
