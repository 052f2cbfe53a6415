package telegramtest

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// MaxTextLength is the longest message text, in UTF-16 code units after entity parsing.
const MaxTextLength = 4096

// chatActions are the actions sendChatAction accepts.
var chatActions = []string{"typing", "upload_photo", "record_video", "upload_video", "record_voice",
	"upload_voice", "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note"}

// sendMessage serves sendMessage. Checks run in this order: chat (exists, not migrated),
// message_thread_id, text (parse_mode, empty, length), the replied message, flood control.
func (s *Server) sendMessage(c *call) (any, *apiError) {
	p := c.params
	thread, _, e := optInt(p, "message_thread_id")
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.resolveChatLocked(p)
	if e != nil {
		return nil, e
	}
	if e := ch.checkThread(thread, true); e != nil {
		return nil, e
	}
	text, e := checkText(p)
	if e != nil {
		return nil, e
	}
	reply, e := s.replyLocked(ch, p)
	if e != nil {
		return nil, e
	}
	markup, e := checkMarkup(p)
	if e != nil {
		return nil, e
	}
	if thread == 0 && reply != nil && reply.IsTopicMessage {
		thread = reply.MessageThreadID // a reply lands in the replied message's topic
	}
	if e := s.floodLocked(ch); e != nil {
		return nil, e
	}
	now := s.cfg.clock.Now()
	m := ch.newMessageLocked(&Message{
		From: c.bot.sender(), Date: now.Unix(), Text: text.text, Entities: text.entities,
		ReplyMarkup: markup, ReplyToMessage: shallow(reply),
	})
	if thread != 0 {
		m.MessageThreadID, m.IsTopicMessage = thread, true
	}
	rec := &SentMessage{Token: c.bot.token, Message: *m, Raw: p["text"], ParseMode: p["parse_mode"], Time: now, Method: c.req.Method}
	k := threadKey{ch.ID, thread}
	s.sent[k] = append(s.sent[k], rec)
	s.order = append(s.order, rec)
	s.changedLocked()
	return *m, nil
}

// editMessageText serves editMessageText for chat_id + message_id (inline messages are not
// modelled and get "MESSAGE_ID_INVALID").
func (s *Server) editMessageText(c *call) (any, *apiError) {
	p := c.params
	if p["inline_message_id"] != "" {
		return nil, badRequest("MESSAGE_ID_INVALID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.resolveChatLocked(p)
	if e != nil {
		return nil, e
	}
	id, _, e := optInt(p, "message_id")
	if e != nil {
		return nil, e
	}
	m := ch.messages[id]
	if m == nil {
		return nil, badRequest("message to edit not found")
	}
	if m.From == nil || m.From.ID != c.bot.user.ID {
		return nil, badRequest("message can't be edited")
	}
	text, e := checkText(p)
	if e != nil {
		return nil, e
	}
	markup, e := checkMarkup(p)
	if e != nil {
		return nil, e
	}
	if text.text == m.Text && slices.Equal(text.entities, m.Entities) && string(markup) == string(m.ReplyMarkup) {
		return nil, badRequest("message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
	}
	if e := s.floodLocked(ch); e != nil {
		return nil, e
	}
	now := s.cfg.clock.Now()
	old := m.Text
	m.Text, m.Entities, m.ReplyMarkup, m.EditDate = text.text, text.entities, markup, now.Unix()
	for _, rec := range s.order {
		if rec.Message.Chat.ID == ch.ID && rec.Message.MessageID == id {
			rec.Edits = append(rec.Edits, old)
			rec.Message, rec.Raw, rec.ParseMode = *m, p["text"], p["parse_mode"]
		}
	}
	s.changedLocked()
	return *m, nil
}

// sendChatAction serves sendChatAction: it accepts the General topic's id 1, unlike sendMessage.
func (s *Server) sendChatAction(c *call) (any, *apiError) {
	p := c.params
	thread, _, e := optInt(p, "message_thread_id")
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.resolveChatLocked(p)
	if e != nil {
		return nil, e
	}
	if !slices.Contains(chatActions, p["action"]) {
		return nil, badRequest("wrong parameter action in request")
	}
	if e := ch.checkThread(thread, false); e != nil {
		return nil, e
	}
	s.actions = append(s.actions, ChatAction{Token: c.bot.token, ChatID: ch.ID, Thread: thread, Action: p["action"], Time: s.cfg.clock.Now()})
	s.changedLocked()
	return true, nil
}

// checkText parses the text parameter with parse_mode and checks its length.
func checkText(p map[string]string) (parsed, *apiError) {
	text, perr := parseText(p["text"], p["parse_mode"])
	if perr != "" {
		return parsed{}, badRequest("%s", perr)
	}
	if text.text == "" {
		return parsed{}, badRequest("message text is empty")
	}
	if utf16Len(text.text) > MaxTextLength {
		return parsed{}, badRequest("message is too long")
	}
	return text, nil
}

// replyLocked finds the message a send replies to (reply_parameters, or the older
// reply_to_message_id), or nil for none.
func (s *Server) replyLocked(ch *chat, p map[string]string) (*Message, *apiError) {
	allow := boolParam(p, "allow_sending_without_reply")
	target := ch
	var id int64
	quote := ""
	if raw := p["reply_parameters"]; raw != "" {
		var rp struct {
			MessageID int64           `json:"message_id"`
			ChatID    json.RawMessage `json:"chat_id"`
			Allow     bool            `json:"allow_sending_without_reply"`
			Quote     string          `json:"quote"`
		}
		if err := json.Unmarshal([]byte(raw), &rp); err != nil {
			return nil, badRequest("can't parse reply parameters JSON object")
		}
		id, allow, quote = rp.MessageID, allow || rp.Allow, rp.Quote
		if len(rp.ChatID) > 0 {
			var chatID string
			if json.Unmarshal(rp.ChatID, &chatID) != nil {
				chatID = string(rp.ChatID)
			}
			t, e := s.resolveChatLocked(map[string]string{"chat_id": chatID})
			if e != nil {
				return nil, e
			}
			target = t
		}
	} else {
		var e *apiError
		if id, _, e = optInt(p, "reply_to_message_id"); e != nil {
			return nil, e
		}
	}
	if id == 0 {
		return nil, nil
	}
	m := target.messages[id]
	if m == nil {
		if allow {
			return nil, nil
		}
		return nil, badRequest("message to be replied not found")
	}
	if quote != "" && !strings.Contains(m.Text, quote) {
		return nil, badRequest("QUOTE_TEXT_INVALID")
	}
	return m, nil
}

// floodLocked applies the optional rate limiter to a message for ch.
func (s *Server) floodLocked(ch *chat) *apiError {
	if s.flood == nil {
		return nil
	}
	wait := s.flood.take(ch.ID, ch.Type != Private, s.cfg.clock.Now())
	if wait <= 0 {
		return nil
	}
	n := retryAfter(wait)
	return &apiError{code: 429, desc: "Too Many Requests: retry after " + strconv.Itoa(n), params: &ResponseParameters{RetryAfter: n}}
}

// markupParam returns reply_markup normalized (so equal markups compare equal), or nil.
func markupParam(p map[string]string) json.RawMessage {
	raw := p["reply_markup"]
	if raw == "" {
		return nil
	}
	var v any
	if json.Unmarshal([]byte(raw), &v) != nil {
		return nil
	}
	out, _ := json.Marshal(v)
	return out
}

// shallow copies m without its own reply, as Telegram nests replies one level deep.
func shallow(m *Message) *Message {
	if m == nil {
		return nil
	}
	c := *m
	c.ReplyToMessage = nil
	return &c
}

// sender is the bot as the From of its messages.
func (b *Bot) sender() *User {
	return &User{ID: b.user.ID, IsBot: true, FirstName: b.user.FirstName, Username: b.user.Username}
}
