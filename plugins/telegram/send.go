package main

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// MaxText is Telegram's limit on a message's text, in UTF-16 code units.
const MaxText = 4096

// generalTopic is the thread id of a forum's General topic: sendMessage refuses it (a message
// without message_thread_id goes there), sendChatAction accepts it.
const generalTopic = "1"

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
	ReplyMarkup     *inlineKeyboard  `json:"reply_markup,omitempty"`
}

// send transmits one message, edit or chat action, within sendBudget (a file within
// uploadBudget: see sendMedia). Buttons become an inline keyboard (reply_markup) whose
// callback_data are the buttons' ids. It never sleeps or
// retries, except once without message_thread_id when Telegram answers "message thread not
// found" (and says so in the result's thread_id).
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return failed(abi.SendPermanent, "bad_config", strings.Join(p, "; ")), nil
	}
	a := &api{c: c, cfg: cfg}
	b := newBudget(sendBudget)
	if msg.Action != "" {
		return sendAction(a, b, msg), nil
	}
	markup, bad := keyboard(msg.Buttons)
	switch {
	case bad != "":
		return failed(abi.SendPermanent, "bad_buttons", bad+"; not sent"), nil
	case len(msg.Attachments) > 0 && msg.EditMessageID != "":
		return failed(abi.SendPermanent, "bad_request", "an edit cannot carry a file; not sent"), nil
	case len(msg.Attachments) > 0:
		return sendMedia(a, newBudget(uploadBudget), msg, markup), nil
	case utf16Len(msg.Text) > MaxText:
		return failed(abi.SendPermanent, "message_too_long", "text of "+strconv.Itoa(utf16Len(msg.Text))+
			" UTF-16 units exceeds Telegram's "+strconv.Itoa(MaxText)+"; not sent"), nil
	case strings.TrimSpace(msg.Text) == "":
		return failed(abi.SendPermanent, "empty_text", "Telegram refuses empty messages; not sent"), nil
	case msg.EditMessageID != "":
		return editMessage(a, b, msg, markup), nil
	}
	p := sendMessageParams{ChatID: msg.ChatID, Text: msg.Text, ReplyMarkup: markup}
	if msg.ThreadID != generalTopic {
		p.MessageThreadID = threadParam(c, msg.ThreadID)
	}
	if id, err := strconv.ParseInt(msg.ReplyTo, 10, 64); err == nil && id > 0 {
		p.ReplyParameters = &replyParameters{MessageID: id, AllowSendingWithoutReply: true}
	}
	r, err := a.within(b, "sendMessage", p)
	var moved *string
	if err == nil && !r.OK && p.MessageThreadID != 0 && r.is("message thread not found") {
		c.Log(abi.LevelWarn, "topic not found; sending without message_thread_id", "chat_id", msg.ChatID, "thread_id", msg.ThreadID)
		p.MessageThreadID = 0
		none := ""
		moved = &none // tell the host the message went to the chat itself
		r, err = a.within(b, "sendMessage", p)
	}
	if res := sendFailure(a, r, err, true); res != nil {
		return res, nil
	}
	if !r.Envelope {
		c.Log(abi.LevelWarn, "sendMessage answered "+strconv.Itoa(r.Status)+" with an unreadable body: the message was posted, its id is unknown",
			"chat_id", msg.ChatID)
	}
	return &abi.SendResult{MessageIDs: sentID(r), ThreadID: moved}, nil
}

// within calls method with what is left of b as its timeout; when too little is left the
// request is not made and the error is a timeout (nothing sent: retryable).
func (a *api) within(b budget, method string, params any) (*reply, error) {
	t, ok := b.timeout(b.left())
	if !ok {
		return nil, errNoTime(method)
	}
	return a.call(method, params, t)
}

// sendAction sends a chat action ("typing"). The General topic's id is kept: sendChatAction
// accepts it.
func sendAction(a *api, b budget, msg *abi.OutboundMessage) *abi.SendResult {
	if msg.Action != "typing" {
		return failed(abi.SendPermanent, "unsupported_action", "chat action "+strconv.Quote(msg.Action)+" is not supported")
	}
	p := struct {
		ChatID          string `json:"chat_id"`
		MessageThreadID int64  `json:"message_thread_id,omitempty"`
		Action          string `json:"action"`
	}{ChatID: msg.ChatID, MessageThreadID: threadParam(a.c, msg.ThreadID), Action: "typing"}
	r, err := a.within(b, "sendChatAction", p)
	if err == nil && !r.OK && p.MessageThreadID != 0 && r.is("message thread not found") {
		p.MessageThreadID = 0
		r, err = a.within(b, "sendChatAction", p)
	}
	if res := sendFailure(a, r, err, false); res != nil {
		return res
	}
	return &abi.SendResult{}
}

// editMessage replaces a message's text. "message is not modified" means the text is already
// what we want: success.
func editMessage(a *api, b budget, msg *abi.OutboundMessage, markup *inlineKeyboard) *abi.SendResult {
	id, err := strconv.ParseInt(msg.EditMessageID, 10, 64)
	if err != nil || id <= 0 {
		return failed(abi.SendPermanent, "bad_request", "edit_message_id "+strconv.Quote(msg.EditMessageID)+" is not a Telegram message id")
	}
	p := struct {
		ChatID      string          `json:"chat_id"`
		MessageID   int64           `json:"message_id"`
		Text        string          `json:"text"`
		ReplyMarkup *inlineKeyboard `json:"reply_markup,omitempty"`
	}{msg.ChatID, id, msg.Text, markup}
	r, err := a.within(b, "editMessageText", p)
	if err == nil && !r.OK && r.Status == 400 && r.is("message is not modified") {
		return &abi.SendResult{MessageIDs: []string{msg.EditMessageID}}
	}
	if res := sendFailure(a, r, err, false); res != nil {
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

// sendFailure maps a call to a typed send failure, or returns nil when Telegram executed the
// method. duplicates says whether repeating the request would repeat its effect (a message
// posted twice), as opposed to an edit to the same text or a chat action. The rule is SPEC
// 2.6's, "a possible gap is better than a duplicate" (see RATIONALE.md):
//
//   - nothing was sent (io, timeout before a connection, a budget spent before the request),
//     429 (retry after parameters.retry_after): retryable;
//   - an answer with status 200 (even with an unreadable body): executed, nil;
//   - sent without an answer (uncertain: a reset, no answer in time, a body cut short), or a
//     5xx (the front end's or the Bot API's, before or after the effect): uncertain when a
//     repeat duplicates, else retryable;
//   - parameters.migrate_to_chat_id: permanent, with the new chat id for the host to
//     re-address; egress denied, other 4xx: permanent, with Telegram's description;
//   - any other answer that is not Bot API JSON (a proxy's 4xx page): retryable, it was not
//     Telegram that answered.
func sendFailure(a *api, r *reply, err error, duplicates bool) *abi.SendResult {
	maybe := abi.SendRetryable // what "it may have been executed" becomes
	if duplicates {
		maybe = abi.SendUncertain
	}
	if err != nil {
		e := abi.AsError(err)
		kind := abi.SendRetryable
		switch e.Code {
		case abi.CodeDenied, abi.CodeBadRequest:
			kind = abi.SendPermanent // egress policy or a bad URL: retrying cannot help
		case abi.CodeUncertain, abi.CodeTooLarge:
			kind = maybe // the request went out; the answer was lost (or too big to read)
		}
		return failed(kind, e.Code, e.Message)
	}
	if r.OK || (r.Status >= 200 && r.Status < 300 && !r.Envelope) {
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
	case r.Status >= 500:
		return failed(maybe, "server_error", desc)
	case !r.Envelope:
		return failed(abi.SendRetryable, "not_telegram", desc)
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
