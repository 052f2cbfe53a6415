package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// defaultRetryAfter is the wait assumed when a 429 says nothing of its own.
const defaultRetryAfter = 5 * time.Second

// maxEvent is the most content bytes sent in one event: the homeserver refuses an event over
// 64 KiB (M_TOO_LARGE), its envelope included.
const maxEvent = 60000

// typingTimeout is how long a typing notification lasts unless renewed.
const typingTimeout = 30 * time.Second

// E2EENotice is what an end-to-end encrypted room is told, once, in place of the first message
// the host sends there.
const E2EENotice = "This room is end-to-end encrypted, and this bot does not support encryption: it cannot read " +
	"messages here and does not answer. Talk to it in an unencrypted room."

// noticeTxn is the transaction id of the encryption notice: one fixed id per room, so the
// homeserver posts it once however often send tries.
const noticeTxn = "hermes.e2ee-notice"

// send transmits one message, edit or typing notification. It never sleeps or retries: the
// host does, with the same delivery id, which the transaction id is derived from, so that a
// retry after an ambiguous answer is deduplicated by the homeserver (see sendFailure).
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return failed(abi.SendPermanent, "bad_config", strings.Join(p, "; ")), nil
	}
	a := newAPI(c, cfg, sendBudget)
	if msg.Action != "" {
		return typing(a, msg), nil
	}
	if strings.TrimSpace(msg.Text) == "" {
		return failed(abi.SendPermanent, "no_text", "empty message; not sent"), nil
	}
	if info := loadRoom(c, msg.ChatID); info.Encrypted {
		return refuseEncrypted(a, msg.ChatID, info), nil
	}
	content := map[string]any{"msgtype": "m.text", "body": msg.Text, "m.mentions": map[string]any{}}
	var txn string
	idempotent := true
	switch {
	case msg.EditMessageID != "":
		// An edit: the same text for the same message is the same transaction.
		sum := sha256.Sum256([]byte(msg.EditMessageID + "\x00" + msg.Text))
		txn = "hermes.edit." + hex.EncodeToString(sum[:12])
		content = map[string]any{"msgtype": "m.text", "body": "* " + msg.Text, "m.mentions": map[string]any{},
			"m.new_content": map[string]any{"msgtype": "m.text", "body": msg.Text, "m.mentions": map[string]any{}},
			"m.relates_to":  map[string]any{"rel_type": "m.replace", "event_id": msg.EditMessageID}}
	case msg.DeliveryID != "":
		txn = "hermes." + txnSafe(msg.DeliveryID)
		addRelation(content, msg)
	default:
		// No delivery id (an older host): a fresh id, and an ambiguous answer stays uncertain.
		txn, idempotent = "hermes.r."+random(), false
		addRelation(content, msg)
	}
	if b, _ := json.Marshal(content); len(b) > maxEvent {
		return failed(abi.SendPermanent, "M_TOO_LARGE", "the message is larger than a Matrix event may be; not sent"), nil
	}
	r, err := a.call("PUT", sendPath(msg.ChatID, txn), nil, content, 5*time.Second)
	if res := sendFailure(a, r, err, idempotent || msg.EditMessageID != ""); res != nil {
		return res, nil
	}
	var ok struct {
		EventID string `json:"event_id"`
	}
	json.Unmarshal(r.Body, &ok)
	if ok.EventID == "" {
		return &abi.SendResult{}, nil // executed (a 200) but unreadable: posted, without an id
	}
	if msg.EditMessageID != "" {
		return &abi.SendResult{MessageIDs: []string{msg.EditMessageID}}, nil
	}
	remember(c, slotOwn, ok.EventID)
	return &abi.SendResult{MessageIDs: []string{ok.EventID}}, nil
}

// addRelation puts the message into its thread (with Element's fallback reply to the message
// answered, or to the root) or makes it a reply.
func addRelation(content map[string]any, msg *abi.OutboundMessage) {
	switch {
	case msg.ThreadID != "":
		rel := map[string]any{"rel_type": "m.thread", "event_id": msg.ThreadID}
		if msg.ReplyTo != "" {
			rel["m.in_reply_to"] = map[string]any{"event_id": msg.ReplyTo}
		} else {
			rel["is_falling_back"] = true
			rel["m.in_reply_to"] = map[string]any{"event_id": msg.ThreadID}
		}
		content["m.relates_to"] = rel
	case msg.ReplyTo != "":
		content["m.relates_to"] = map[string]any{"m.in_reply_to": map[string]any{"event_id": msg.ReplyTo}}
	}
}

func sendPath(room, txn string) string {
	return clientAPI + "/rooms/" + url.PathEscape(room) + "/send/m.room.message/" + url.PathEscape(txn)
}

// sendFailure maps a failed send to a typed failure, or returns nil on success (a 200).
//
// idempotent says the request carried a transaction id the host's retry repeats (derived from
// the delivery id, or from an edit's content). The homeserver answers a repeated transaction id
// with the first request's event instead of posting again (client-server API, "Transaction
// identifiers"), so an answer that may follow the effect (a 5xx, a reset, a lost or cut answer)
// is retryable: the retry posts the message if the first attempt did not, and answers its
// event id if it did. Without such an id it is uncertain, never resent. Either way:
//   - transport: io and timeout (nothing sent) retryable; denied, bad_request permanent;
//   - 429 (M_LIMIT_EXCEEDED) retryable after retry_after_ms (or Retry-After);
//   - any other 4xx permanent with its errcode (M_FORBIDDEN: not in the room; M_UNKNOWN_TOKEN).
func sendFailure(a *api, r *reply, err error, idempotent bool) *abi.SendResult {
	ambiguous := func(code, message string) *abi.SendResult {
		if idempotent {
			return failed(abi.SendRetryable, code, message+"; the retry repeats the transaction id, which the homeserver deduplicates")
		}
		return failed(abi.SendUncertain, code, message+"; the message may have been posted")
	}
	if err != nil {
		e := abi.AsError(err)
		switch e.Code {
		case abi.CodeUncertain, abi.CodeTooLarge:
			return ambiguous(abi.CodeUncertain, "send: "+e.Message)
		case abi.CodeDenied, abi.CodeBadRequest, abi.CodeUnsupported:
			return failed(abi.SendPermanent, e.Code, e.Message)
		}
		return failed(abi.SendRetryable, e.Code, e.Message)
	}
	if r.Status == 200 {
		return nil
	}
	desc := "send: " + a.scrub(r.describe())
	switch {
	case r.Status == 429 || r.Errcode == "M_LIMIT_EXCEEDED":
		res := failed(abi.SendRetryable, "M_LIMIT_EXCEEDED", desc)
		wait := r.RetryAfter
		if wait <= 0 {
			wait = defaultRetryAfter
		}
		res.Error.RetryAfterMs = wait.Milliseconds()
		return res
	case r.Status >= 500:
		return ambiguous("server_error", desc)
	case r.Errcode != "":
		return failed(abi.SendPermanent, r.Errcode, desc)
	}
	return failed(abi.SendPermanent, "http_"+strconv.Itoa(r.Status), desc)
}

// typing shows the bot typing in the room. Harmless to repeat: anything but a refusal is
// retryable.
func typing(a *api, msg *abi.OutboundMessage) *abi.SendResult {
	if msg.Action != "typing" {
		return failed(abi.SendPermanent, "unsupported_action", "chat action "+strconv.Quote(msg.Action)+" is not supported")
	}
	if loadRoom(a.c, msg.ChatID).Encrypted {
		return &abi.SendResult{}
	}
	me, err := a.me()
	if err != nil {
		return failed(abi.SendRetryable, abi.CodeOf(err), "typing: cannot learn the bot's user id: "+a.scrub(err.Error()))
	}
	path := clientAPI + "/rooms/" + url.PathEscape(msg.ChatID) + "/typing/" + url.PathEscape(me.UserID)
	r, err := a.call("PUT", path, nil, map[string]any{"typing": true, "timeout": typingTimeout.Milliseconds()}, 4*time.Second)
	if res := sendFailure(a, r, err, true); res != nil {
		return res
	}
	return &abi.SendResult{}
}

// refuseEncrypted answers a send into an end-to-end encrypted room: the room is told once (a
// fixed transaction id, so the homeserver posts the notice at most once whatever happens to
// the answer), and the message is refused, permanent.
func refuseEncrypted(a *api, room string, info roomInfo) *abi.SendResult {
	refused := failed(abi.SendPermanent, "encrypted_room",
		"the room is end-to-end encrypted, which this plugin does not support; not sent (the room was told once)")
	if info.Told {
		return refused
	}
	content := map[string]any{"msgtype": "m.notice", "body": E2EENotice, "m.mentions": map[string]any{}}
	r, err := a.call("PUT", sendPath(room, noticeTxn), nil, content, 5*time.Second)
	if res := sendFailure(a, r, err, true); res != nil && res.Error.Kind == abi.SendRetryable {
		return res // the notice could not be posted yet: the host retries, the same txn id
	}
	info.Told = true
	saveRoom(a.c, room, info)
	a.c.Log(abi.LevelWarn, "refused a message to an end-to-end encrypted room and told the room so", "room", room)
	return refused
}

func failed(kind, code, message string) *abi.SendResult {
	return &abi.SendResult{Error: &abi.SendError{Kind: kind, Code: code, Message: message}}
}

// txnSafe keeps a transaction id to characters every homeserver takes in a path segment.
func txnSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteString("~" + strconv.FormatInt(int64(r), 16))
		}
	}
	return b.String()
}

func random() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
