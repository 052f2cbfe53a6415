package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// MaxText is Telegram's limit on a message's text, in UTF-16 code units.
const MaxText = 4096

// generalTopic is the thread id of a forum's General topic: sendMessage refuses it (a message
// without message_thread_id goes there), sendChatAction accepts it.
const generalTopic = "1"

const sendTimeout = 20 * time.Second

// replyParameters is sendMessage's reply_parameters.
type replyParameters struct {
	MessageID                int64 `json:"message_id"`
	AllowSendingWithoutReply bool  `json:"allow_sending_without_reply"`
}

// sendMessageParams are sendMessage's parameters. Text goes as plain text (no parse_mode), so
// the length the host measured is the length Telegram measures.
type sendMessageParams struct {
	ChatID          string           `json:"chat_id"`
	MessageThreadID int64            `json:"message_thread_id,omitempty"`
	Text            string           `json:"text"`
	ReplyParameters *replyParameters `json:"reply_parameters,omitempty"`
}

// send transmits one message, edit or chat action. It never sleeps or retries, except once
// without message_thread_id when Telegram answers "message thread not found".
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return failed(abi.SendPermanent, "bad_config", strings.Join(p, "; ")), nil
	}
	a := &api{c: c, cfg: cfg}
	switch {
	case msg.Action != "":
		return sendAction(a, msg), nil
	case utf16Len(msg.Text) > MaxText:
		return failed(abi.SendPermanent, "message_too_long", "text of "+strconv.Itoa(utf16Len(msg.Text))+
			" UTF-16 units exceeds Telegram's "+strconv.Itoa(MaxText)+"; not sent"), nil
	case strings.TrimSpace(msg.Text) == "":
		return failed(abi.SendPermanent, "empty_text", "Telegram refuses empty messages; not sent"), nil
	case msg.EditMessageID != "":
		return editMessage(a, msg), nil
	}
	p := sendMessageParams{ChatID: msg.ChatID, Text: msg.Text}
	if msg.ThreadID != generalTopic {
		p.MessageThreadID = threadParam(c, msg.ThreadID)
	}
	if id, err := strconv.ParseInt(msg.ReplyTo, 10, 64); err == nil && id > 0 {
		p.ReplyParameters = &replyParameters{MessageID: id, AllowSendingWithoutReply: true}
	}
	r, err := a.call("sendMessage", p, sendTimeout)
	if err == nil && !r.OK && p.MessageThreadID != 0 && r.is("message thread not found") {
		c.Log(abi.LevelWarn, "topic not found; sending without message_thread_id", "chat_id", msg.ChatID, "thread_id", msg.ThreadID)
		p.MessageThreadID = 0
		r, err = a.call("sendMessage", p, sendTimeout)
	}
	if res := sendFailure(a, r, err); res != nil {
		if res.Error.Code == abi.CodeUncertain {
			// Sent, but the answer was lost: Telegram may have posted it, and a resend could
			// duplicate it in the chat. The host records the outcome as unknown.
			res.Error.Kind = abi.SendUncertain
		}
		return res, nil
	}
	return &abi.SendResult{MessageIDs: sentID(r)}, nil
}

// sendAction sends a chat action ("typing"). The General topic's id is kept: sendChatAction
// accepts it.
func sendAction(a *api, msg *abi.OutboundMessage) *abi.SendResult {
	if msg.Action != "typing" {
		return failed(abi.SendPermanent, "unsupported_action", "chat action "+strconv.Quote(msg.Action)+" is not supported")
	}
	p := struct {
		ChatID          string `json:"chat_id"`
		MessageThreadID int64  `json:"message_thread_id,omitempty"`
		Action          string `json:"action"`
	}{ChatID: msg.ChatID, MessageThreadID: threadParam(a.c, msg.ThreadID), Action: "typing"}
	r, err := a.call("sendChatAction", p, sendTimeout)
	if err == nil && !r.OK && p.MessageThreadID != 0 && r.is("message thread not found") {
		p.MessageThreadID = 0
		r, err = a.call("sendChatAction", p, sendTimeout)
	}
	if res := sendFailure(a, r, err); res != nil {
		return res
	}
	return &abi.SendResult{}
}

// editMessage replaces a message's text. "message is not modified" means the text is already
// what we want: success.
func editMessage(a *api, msg *abi.OutboundMessage) *abi.SendResult {
	id, err := strconv.ParseInt(msg.EditMessageID, 10, 64)
	if err != nil || id <= 0 {
		return failed(abi.SendPermanent, "bad_request", "edit_message_id "+strconv.Quote(msg.EditMessageID)+" is not a Telegram message id")
	}
	p := struct {
		ChatID    string `json:"chat_id"`
		MessageID int64  `json:"message_id"`
		Text      string `json:"text"`
	}{msg.ChatID, id, msg.Text}
	r, err := a.call("editMessageText", p, sendTimeout)
	if err == nil && !r.OK && r.Status == 400 && r.is("message is not modified") {
		return &abi.SendResult{MessageIDs: []string{msg.EditMessageID}}
	}
	if res := sendFailure(a, r, err); res != nil {
		return res
	}
	return &abi.SendResult{MessageIDs: []string{msg.EditMessageID}}
}

// threadParam parses a thread id for message_thread_id (0: none).
func threadParam(c *sdk.Context, thread string) int64 {
	if thread == "" {
		return 0
	}
	n, err := strconv.ParseInt(thread, 10, 64)
	if err != nil || n <= 0 {
		c.Log(abi.LevelWarn, "ignoring a thread id that is not a Telegram topic id", "thread_id", thread)
		return 0
	}
	return n
}

// sentID reads the message id of a sendMessage result (none if the result is unreadable: the
// message was accepted all the same).
func sentID(r *reply) []string {
	var m struct {
		MessageID int64 `json:"message_id"`
	}
	if json.Unmarshal(r.Result, &m) != nil || m.MessageID <= 0 {
		return nil
	}
	return []string{strconv.FormatInt(m.MessageID, 10)}
}

// sendFailure maps a failed call to a typed send failure, or returns nil on success:
//   - transport failures (io, timeout, and uncertain: sent without an answer, which send turns
//     into SendUncertain for sendMessage, as repeating an action or an edit is harmless), 5xx,
//     and answers that are not Bot API JSON: retryable;
//   - 429: retryable after parameters.retry_after;
//   - parameters.migrate_to_chat_id: permanent, with the new chat id for the host to re-address;
//   - other 4xx: permanent, with Telegram's description.
func sendFailure(a *api, r *reply, err error) *abi.SendResult {
	if err != nil {
		e := abi.AsError(err)
		kind := abi.SendRetryable
		if e.Code == abi.CodeDenied || e.Code == abi.CodeBadRequest {
			kind = abi.SendPermanent // egress policy or a bad URL: retrying cannot help
		}
		return failed(kind, e.Code, e.Message)
	}
	if r.OK {
		return nil
	}
	desc := a.scrub(r.describe())
	switch {
	case r.Status == 429 || r.ErrorCode == 429:
		res := failed(abi.SendRetryable, "rate_limited", desc)
		res.Error.RetryAfterMs = r.retryAfter()
		return res
	case r.Parameters.MigrateToChatID != 0:
		res := failed(abi.SendPermanent, "migrated", desc)
		res.Error.MigrateToChatID = strconv.FormatInt(r.Parameters.MigrateToChatID, 10)
		return res
	case r.Status >= 500 || !r.Envelope:
		return failed(abi.SendRetryable, "server_error", desc)
	}
	return failed(abi.SendPermanent, errorCode(r), desc)
}

// errorCode names a Bot API refusal for SendError.Code.
func errorCode(r *reply) string {
	for _, c := range []struct{ text, code string }{
		{"chat not found", "chat_not_found"},
		{"message thread not found", "thread_not_found"},
		{"message is too long", "message_too_long"},
		{"can't parse entities", "parse_error"},
		{"message to edit not found", "message_not_found"},
		{"message can't be edited", "cannot_edit"},
		{"bot was blocked", "blocked"},
		{"bot was kicked", "kicked"},
		{"not enough rights", "forbidden"},
	} {
		if r.is(c.text) {
			return c.code
		}
	}
	switch r.Status {
	case 401:
		return "unauthorized"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	}
	return "bad_request"
}

func failed(kind, code, message string) *abi.SendResult {
	return &abi.SendResult{Error: &abi.SendError{Kind: kind, Code: code, Message: message}}
}
