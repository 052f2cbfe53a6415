package telegramtest

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Press queues the callback_query of from pressing the inline keyboard button with
// callback_data data under message messageID of chatID, as Telegram does: the query carries
// the whole message (with its reply_markup) and the button's data. It fails when the message
// is unknown or has no such button, which no real client could press.
func (b *Bot) Press(chatID, messageID int64, from User, data string) (Update, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[chatID]
	if ch == nil || ch.messages[messageID] == nil {
		return Update{}, errors.New("telegramtest: no message " + strconv.FormatInt(messageID, 10) + " in chat " + strconv.FormatInt(chatID, 10))
	}
	m := ch.messages[messageID]
	var markup struct {
		Inline [][]struct {
			Data string `json:"callback_data"`
		} `json:"inline_keyboard"`
	}
	json.Unmarshal(m.ReplyMarkup, &markup)
	for _, row := range markup.Inline {
		for _, btn := range row {
			if btn.Data == data && data != "" {
				return b.injectCallbackLocked(CallbackQuery{From: from, Message: shallow(m), Data: data}), nil
			}
		}
	}
	return Update{}, errors.New("telegramtest: message " + strconv.FormatInt(messageID, 10) + " has no button with callback_data " + strconv.Quote(data))
}

// InjectCallback queues q as a callback_query update (a fresh id when q.ID is empty), whatever
// its data: for forged or stale presses.
func (b *Bot) InjectCallback(q CallbackQuery) Update {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.injectCallbackLocked(q)
}

func (b *Bot) injectCallbackLocked(q CallbackQuery) Update {
	if q.ID == "" {
		b.s.nextQuery++
		q.ID = strconv.FormatInt(b.user.ID%100000*1000000000+int64(b.s.nextQuery), 10)
	}
	if q.ChatInstance == "" && q.Message != nil {
		q.ChatInstance = strconv.FormatInt(-q.Message.Chat.ID*7+13, 10)
	}
	if b.queries == nil {
		b.queries = map[string]bool{}
	}
	b.queries[q.ID] = false
	return b.enqueueLocked(Update{CallbackQuery: &q})
}

// answerCallbackQuery serves answerCallbackQuery: each query the bot received may be answered
// once; an unknown or already answered one is 400 "query is too old and response timeout
// expired or query ID is invalid". text is limited to 200 characters.
func (s *Server) answerCallbackQuery(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := strings.TrimSpace(c.params["callback_query_id"])
	answered, known := c.bot.queries[id]
	switch {
	case id == "":
		return nil, badRequest("callback_query_id is empty")
	case !known || answered:
		return nil, badRequest("query is too old and response timeout expired or query ID is invalid")
	case len([]rune(c.params["text"])) > 200:
		return nil, badRequest("MESSAGE_TOO_LONG")
	}
	c.bot.queries[id] = true
	s.answers = append(s.answers, CallbackAnswer{Token: c.bot.token, QueryID: id, Text: c.params["text"],
		ShowAlert: boolParam(c.params, "show_alert"), Time: s.cfg.clock.Now()})
	s.changedLocked()
	return true, nil
}

// Answers returns the recorded answerCallbackQuery calls that Telegram accepted, oldest first.
func (s *Server) Answers() []CallbackAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CallbackAnswer(nil), s.answers...)
}
