package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// This file turns Telegram updates into abi.InboundEvents. It is pure (no host calls), so it is
// unit-tested and fuzzed natively.

// update is the part of a Telegram Update the plugin reads. At most one payload is set.
type update struct {
	UpdateID          int64          `json:"update_id"`
	Message           *message       `json:"message"`
	EditedMessage     *message       `json:"edited_message"`
	ChannelPost       *message       `json:"channel_post"`
	EditedChannelPost *message       `json:"edited_channel_post"`
	CallbackQuery     *callbackQuery `json:"callback_query"`
}

// callbackQuery is a press of an inline keyboard button. Message is the bot's message that
// carried the keyboard (absent for inline-mode messages; for one older than 48 hours Telegram
// sends only its chat, id and date 0).
type callbackQuery struct {
	ID      string   `json:"id"`
	From    *user    `json:"from"`
	Message *message `json:"message"`
	Data    string   `json:"data"`
}

// user is a Telegram user or bot.
type user struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Username  string `json:"username"`
}

// chat is the chat a message belongs to (or the chat a message was sent on behalf of).
type chat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Title     string `json:"title"`
	Username  string `json:"username"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	IsForum   bool   `json:"is_forum"`
}

// entity marks a span of text; Offset and Length count UTF-16 code units.
type entity struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	User   *user  `json:"user"`
}

// message is the part of a Telegram Message the plugin reads. Media fields are kept raw: only
// their presence (and a name or two) matters, and a shape change there must not make the whole
// update unreadable.
type message struct {
	MessageID         int64           `json:"message_id"`
	MessageThreadID   int64           `json:"message_thread_id"`
	IsTopicMessage    bool            `json:"is_topic_message"`
	From              *user           `json:"from"`
	SenderChat        *chat           `json:"sender_chat"`
	Chat              chat            `json:"chat"`
	Date              int64           `json:"date"`
	EditDate          int64           `json:"edit_date"`
	Text              string          `json:"text"`
	Entities          []entity        `json:"entities"`
	Caption           string          `json:"caption"`
	CaptionEntities   []entity        `json:"caption_entities"`
	ReplyToMessage    *message        `json:"reply_to_message"`
	ForumTopicCreated json.RawMessage `json:"forum_topic_created"`
	MigrateToChatID   int64           `json:"migrate_to_chat_id"`
	MigrateFromChatID int64           `json:"migrate_from_chat_id"`

	Photo     json.RawMessage `json:"photo"`
	Video     json.RawMessage `json:"video"`
	VideoNote json.RawMessage `json:"video_note"`
	Animation json.RawMessage `json:"animation"`
	Voice     json.RawMessage `json:"voice"`
	Audio     json.RawMessage `json:"audio"`
	Document  json.RawMessage `json:"document"`
	Sticker   json.RawMessage `json:"sticker"`
	Location  json.RawMessage `json:"location"`
	Contact   json.RawMessage `json:"contact"`
	Poll      json.RawMessage `json:"poll"`
}

// identity is the bot's own account, needed to recognise mentions, replies and commands.
type identity struct {
	ID       int64  `json:"id"`
	Username string `json:"username"` // without the @
}

// mapOptions are what mapping needs besides the update.
type mapOptions struct {
	Me identity
	// RequireMention makes unaddressed group and channel messages "observe" events.
	RequireMention bool
}

// errNoUpdateID reports an update without a usable update_id.
var errNoUpdateID = errors.New("update has no positive update_id")

// peekUpdateID reads only the update_id of a raw update, so a batch's offset can advance past
// an update whose body is otherwise unreadable.
func peekUpdateID(raw []byte) (int64, error) {
	var u struct {
		UpdateID int64 `json:"update_id"`
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		return 0, err
	}
	if u.UpdateID <= 0 {
		return 0, errNoUpdateID
	}
	return u.UpdateID, nil
}

// parseUpdate decodes one raw update and maps it. It returns the update_id (0 when unreadable),
// the event, and, when there is no event, why the update was skipped. err is set only for
// malformed input; a well-formed update the plugin does not turn into an event is a skip.
func parseUpdate(raw []byte, o mapOptions) (id int64, ev *abi.InboundEvent, skip string, err error) {
	var u update
	if err := json.Unmarshal(raw, &u); err != nil {
		id, _ := peekUpdateID(raw)
		return id, nil, "", err
	}
	if u.UpdateID <= 0 {
		return 0, nil, "", errNoUpdateID
	}
	ev, skip = mapUpdate(&u, o)
	return u.UpdateID, ev, skip, nil
}

// mapUpdate turns a decoded update into an event, or says why it is skipped.
func mapUpdate(u *update, o mapOptions) (*abi.InboundEvent, string) {
	m, edited := u.Message, false
	switch {
	case u.Message != nil:
	case u.ChannelPost != nil:
		m = u.ChannelPost
	case u.EditedMessage != nil:
		m, edited = u.EditedMessage, true
	case u.EditedChannelPost != nil:
		m, edited = u.EditedChannelPost, true
	case u.CallbackQuery != nil:
		return callback(u)
	default:
		return nil, "unsupported update type"
	}
	if m.Chat.ID == 0 || m.MessageID <= 0 {
		return nil, "message without chat id or message id"
	}
	if m.MigrateToChatID != 0 || m.MigrateFromChatID != 0 {
		return migration(u, m)
	}
	if m.From != nil && m.From.IsBot && !anonymousAdmin(m) {
		return nil, "message from a bot"
	}
	src, ok := source(m)
	if !ok {
		return nil, "unsupported chat type " + strconv.Quote(m.Chat.Type)
	}
	text, entities := m.Text, m.Entities
	atts := attachments(m)
	if text == "" {
		text, entities = m.Caption, m.CaptionEntities
		if d := describeMedia(m); d != "" && len(atts) == 0 {
			// Content without a file the host could fetch (a location, a poll): named in text.
			text = strings.TrimSpace(d + " " + text)
			entities = nil // offsets no longer match; the mention scan below falls back to the text
		}
	}
	if strings.TrimSpace(text) == "" && len(atts) == 0 {
		return nil, "service message or message without text"
	}

	addressed := src.ChatType == abi.ChatDM
	if o.Me.Username != "" && hasMention(text, entities, o.Me) {
		addressed = true
	}
	if cmd, target, rest, ok := parseCommand(stripLeadingMention(text, o.Me.Username)); ok {
		if target != "" && !strings.EqualFold(target, o.Me.Username) {
			return nil, "command addressed to another bot (@" + target + ")"
		}
		text, addressed = joinCommand(cmd, rest), true
	} else if s := stripLeadingMention(text, o.Me.Username); s != text && strings.TrimSpace(s) != "" {
		text = s
	}
	var replyTo string
	if r := m.ReplyToMessage; r != nil && r.MessageID > 0 && !isTopicRoot(m) {
		replyTo = strconv.FormatInt(r.MessageID, 10)
		if r.From != nil && (r.From.ID == o.Me.ID && o.Me.ID != 0 ||
			r.From.IsBot && o.Me.Username != "" && strings.EqualFold(r.From.Username, o.Me.Username)) {
			addressed = true // a reply to the bot counts as a mention
		}
	}

	ev := &abi.InboundEvent{
		ID:        "update:" + strconv.FormatInt(u.UpdateID, 10),
		Kind:      abi.EventMessage,
		Source:    src,
		Text:      text,
		ReplyTo:   replyTo,
		Mentioned: addressed,
		UnixMs:    m.Date * 1000,
	}
	if len(atts) > 0 {
		ev.Attachments = atts
		ev.Attachments[0].Caption = m.Caption
	}
	if !addressed && o.RequireMention {
		ev.Kind = abi.EventObserve
	}
	if edited {
		// An edit never starts a turn: the transcript learns the new wording.
		ev.Kind, ev.Text = abi.EventObserve, "(edited) "+ev.Text
		if m.EditDate > 0 {
			ev.UnixMs = m.EditDate * 1000
		}
	}
	if ev.UnixMs < 0 {
		ev.UnixMs = 0
	}
	return ev, ""
}

// callback maps a button press to an EventCallback: CallbackID is the button's callback_data,
// Source the chat (and topic) of the message that carried the button, with that message's id
// and the user who pressed it. Presses without data (games), on inline-mode messages (no
// message) or with data that is not a button id this host could have sent are skipped; the
// plugin still answers every query (see answerCallbacks).
func callback(u *update) (*abi.InboundEvent, string) {
	q := u.CallbackQuery
	m := q.Message
	switch {
	case q.ID == "":
		return nil, "callback query without an id"
	case m == nil || m.Chat.ID == 0 || m.MessageID <= 0:
		return nil, "callback query without its message (inline mode)"
	case q.From == nil || q.From.ID == 0:
		return nil, "callback query without a sender"
	case !validButtonID(q.Data):
		return nil, "callback query whose data is not a button id"
	}
	presser := *m
	presser.From, presser.SenderChat = q.From, nil
	src, ok := source(&presser)
	if !ok {
		return nil, "callback in an unsupported chat type " + strconv.Quote(m.Chat.Type)
	}
	return &abi.InboundEvent{
		ID:         "update:" + strconv.FormatInt(u.UpdateID, 10),
		Kind:       abi.EventCallback,
		Source:     src,
		CallbackID: q.Data,
		Mentioned:  true,
	}, ""
}

// validButtonID reports whether s is a button id as the ABI defines them: 1-64 bytes of
// [A-Za-z0-9:_-] (64 bytes is also Telegram's callback_data limit).
func validButtonID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isNameByte(c) && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// callbackQueryID is the id of the callback query in a raw update, or "".
func callbackQueryID(raw []byte) string {
	var u struct {
		Q *struct {
			ID string `json:"id"`
		} `json:"callback_query"`
	}
	if json.Unmarshal(raw, &u) != nil || u.Q == nil {
		return ""
	}
	return u.Q.ID
}

// file fields common to Telegram's media objects.
type file struct {
	FileID   string `json:"file_id"`
	FileName string `json:"file_name"`
	MIMEType string `json:"mime_type"`
	FileSize int64  `json:"file_size"`
	Width    int64  `json:"width"`
	Height   int64  `json:"height"`
	// Stickers only.
	IsAnimated bool `json:"is_animated"`
	IsVideo    bool `json:"is_video"`
}

// attachments lists the files of m the host may fetch: the largest size of a photo, a
// document, voice note, audio file, video, video note, animation or sticker. Ref is the
// file_id; a media field whose shape is unreadable is left out (it is still named in the text
// by describeMedia when nothing else is attached).
func attachments(m *message) []abi.Attachment {
	if present(m.Photo) {
		var sizes []file
		if json.Unmarshal(m.Photo, &sizes) == nil {
			best := -1
			for i, p := range sizes {
				if p.FileID == "" {
					continue
				}
				if best < 0 || p.Width*p.Height > sizes[best].Width*sizes[best].Height ||
					p.Width*p.Height == sizes[best].Width*sizes[best].Height && p.FileSize > sizes[best].FileSize {
					best = i
				}
			}
			if best >= 0 {
				p := sizes[best]
				return []abi.Attachment{{Kind: abi.AttachImage, MIMEType: "image/jpeg", Size: max(p.FileSize, 0), Ref: p.FileID}}
			}
		}
	}
	for _, f := range []struct {
		raw  json.RawMessage
		kind string
		mime string // Telegram's format when it names none
	}{
		{m.Voice, abi.AttachVoice, "audio/ogg"},
		{m.VideoNote, abi.AttachVideo, "video/mp4"},
		{m.Audio, abi.AttachAudio, "audio/mpeg"},
		{m.Video, abi.AttachVideo, "video/mp4"},
		{m.Sticker, abi.AttachSticker, ""},
		{m.Document, abi.AttachDocument, "application/octet-stream"}, // after the others: an animation comes with both
		{m.Animation, abi.AttachVideo, "video/mp4"},
	} {
		if !present(f.raw) {
			continue
		}
		var d file
		if json.Unmarshal(f.raw, &d) != nil || d.FileID == "" {
			continue
		}
		a := abi.Attachment{Kind: f.kind, MIMEType: d.MIMEType, Name: d.FileName, Size: max(d.FileSize, 0), Ref: d.FileID}
		if f.kind == abi.AttachSticker {
			switch {
			case d.IsAnimated:
				a.MIMEType = "application/x-tgsticker"
			case d.IsVideo:
				a.MIMEType = "video/webm"
			default:
				a.MIMEType = "image/webp"
			}
		}
		if f.kind == abi.AttachDocument && present(m.Animation) {
			a.Kind = abi.AttachVideo
		}
		if a.MIMEType == "" {
			a.MIMEType = f.mime
		}
		return []abi.Attachment{a}
	}
	return nil
}

// MigrationNote is the transcript's record of a group's upgrade to a supergroup.
const MigrationNote = "(this group was upgraded to a supergroup; the conversation continues here)"

// migration maps the two service messages of a group's upgrade to a supergroup (migrate_to_chat_id
// in the old group, migrate_from_chat_id in the new supergroup) to one observe event each, in
// the new chat and naming the old one, so that the host carries the group's conversations over
// (it records the move once, whichever of the two arrives first).
func migration(u *update, m *message) (*abi.InboundEvent, string) {
	src, ok := source(m)
	if !ok {
		return nil, "migration in an unsupported chat type"
	}
	from := m.MigrateFromChatID
	if m.MigrateToChatID != 0 { // said in the old group: the event belongs to the new one
		from, src.ChatID, src.ChatType, src.ThreadID = m.Chat.ID, strconv.FormatInt(m.MigrateToChatID, 10), abi.ChatGroup, ""
	}
	if from == 0 || strconv.FormatInt(from, 10) == src.ChatID {
		return nil, "migration without two chats"
	}
	return &abi.InboundEvent{
		ID:                "update:" + strconv.FormatInt(u.UpdateID, 10),
		Kind:              abi.EventObserve,
		Source:            src,
		Text:              MigrationNote,
		UnixMs:            max(m.Date, 0) * 1000,
		MigrateFromChatID: strconv.FormatInt(from, 10),
	}, ""
}

// anonymousAdmin reports a message an anonymous group admin sent "as the group": Telegram sets
// from to a placeholder bot and sender_chat to the group itself. A person wrote it.
func anonymousAdmin(m *message) bool {
	return m.SenderChat != nil && m.SenderChat.ID == m.Chat.ID
}

// source maps the chat and the sender. A thread id is set only for real topics: a message with
// is_topic_message (a forum topic, or a topic of a bot's private chat). The message_thread_id of
// a DM reply chain or of a reply in a forum's General topic is not a topic, and neither is the
// General topic itself (id 1, which some clients flag is_topic_message): its messages belong to
// the chat, as the unflagged ones do, so both key into one conversation.
func source(m *message) (abi.Source, bool) {
	topic := m.IsTopicMessage && m.MessageThreadID > 0 &&
		!(m.Chat.Type == "supergroup" && strconv.FormatInt(m.MessageThreadID, 10) == generalTopic)
	s := abi.Source{ChatID: strconv.FormatInt(m.Chat.ID, 10), MessageID: strconv.FormatInt(m.MessageID, 10)}
	switch m.Chat.Type {
	case "private":
		s.ChatType = abi.ChatDM
		s.ChatName = strings.TrimSpace(m.Chat.FirstName + " " + m.Chat.LastName)
		if s.ChatName == "" {
			s.ChatName = m.Chat.Username
		}
	case "group":
		s.ChatType = abi.ChatGroup
	case "supergroup":
		s.ChatType = abi.ChatGroup
		if topic {
			s.ChatType = abi.ChatForum
		}
	case "channel":
		s.ChatType = abi.ChatChannel
	default:
		return abi.Source{}, false
	}
	if s.ChatName == "" {
		s.ChatName = m.Chat.Title
	}
	if topic && (s.ChatType == abi.ChatForum || s.ChatType == abi.ChatDM) {
		s.ThreadID = strconv.FormatInt(m.MessageThreadID, 10)
	}
	switch {
	case m.From != nil && !anonymousAdmin(m):
		s.UserID = strconv.FormatInt(m.From.ID, 10)
		s.UserName = m.From.Username
		if s.UserName == "" {
			s.UserName = strings.TrimSpace(m.From.FirstName + " " + m.From.LastName)
		}
	case m.SenderChat != nil: // a channel post, or a message on behalf of a chat
		s.UserID = strconv.FormatInt(m.SenderChat.ID, 10)
		s.UserName = m.SenderChat.Username
		if s.UserName == "" {
			s.UserName = m.SenderChat.Title
		}
	}
	return s, true
}

// isTopicRoot reports whether m's reply_to_message is only its topic's creation message, which
// Telegram attaches to every message of a topic that is not a real reply.
func isTopicRoot(m *message) bool {
	r := m.ReplyToMessage
	return present(r.ForumTopicCreated) || (m.IsTopicMessage && r.MessageID == m.MessageThreadID)
}

// present reports whether an optional JSON field was sent with a value.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// describeMedia names a message's non-text content, or returns "".
func describeMedia(m *message) string {
	switch {
	case present(m.Photo):
		return "[photo]"
	case present(m.Video):
		return "[video]"
	case present(m.VideoNote):
		return "[video message]"
	case present(m.Animation):
		return "[animation]"
	case present(m.Voice):
		return "[voice message]"
	case present(m.Audio):
		return "[audio]"
	case present(m.Document):
		var d struct {
			FileName string `json:"file_name"`
		}
		if json.Unmarshal(m.Document, &d) == nil && d.FileName != "" {
			return "[document: " + d.FileName + "]"
		}
		return "[document]"
	case present(m.Sticker):
		var s struct {
			Emoji string `json:"emoji"`
		}
		if json.Unmarshal(m.Sticker, &s) == nil && s.Emoji != "" {
			return "[sticker " + s.Emoji + "]"
		}
		return "[sticker]"
	case present(m.Location):
		return "[location]"
	case present(m.Contact):
		return "[contact]"
	case present(m.Poll):
		var p struct {
			Question string `json:"question"`
		}
		if json.Unmarshal(m.Poll, &p) == nil && p.Question != "" {
			return "[poll: " + p.Question + "]"
		}
		return "[poll]"
	}
	return ""
}

// hasMention reports whether text mentions the bot: a mention entity naming it, a text_mention
// of its user, or, when the update carries no entities at all, "@username" as a word.
func hasMention(text string, entities []entity, me identity) bool {
	if entities == nil {
		return containsMention(text, me.Username)
	}
	var units []uint16
	for _, e := range entities {
		switch e.Type {
		case "text_mention":
			if e.User != nil && me.ID != 0 && e.User.ID == me.ID {
				return true
			}
		case "mention":
			if units == nil {
				units = utf16.Encode([]rune(text))
			}
			if e.Offset < 0 || e.Length <= 1 || e.Offset > len(units) || e.Length > len(units)-e.Offset {
				continue
			}
			name := string(utf16.Decode(units[e.Offset+1 : e.Offset+e.Length]))
			if units[e.Offset] == '@' && strings.EqualFold(name, me.Username) {
				return true
			}
		}
	}
	return false
}

// containsMention finds "@username" in text, not followed by another username character.
func containsMention(text, username string) bool {
	if username == "" {
		return false
	}
	at := "@" + strings.ToLower(username)
	lower := strings.ToLower(text)
	for i := 0; ; {
		j := strings.Index(lower[i:], at)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(at)
		if (start == 0 || !isNameByte(lower[start-1])) && (end >= len(lower) || !isNameByte(lower[end])) {
			return true
		}
		i = end
	}
}

// stripLeadingMention removes "@username" (and the separators after it) from the start of text.
func stripLeadingMention(text, username string) string {
	if username == "" || len(text) <= len(username) || text[0] != '@' ||
		!strings.EqualFold(text[1:1+len(username)], username) {
		return text
	}
	rest := text[1+len(username):]
	if rest != "" && isNameByte(rest[0]) {
		return text // @username_longer is someone else
	}
	return strings.TrimLeft(rest, " \t\n,:")
}

// parseCommand splits "/cmd@target rest" (at the start of text). ok is false when text does not
// start with a well-formed command.
func parseCommand(text string) (cmd, target, rest string, ok bool) {
	if !strings.HasPrefix(text, "/") {
		return "", "", "", false
	}
	word, rest := text, ""
	if i := strings.IndexAny(text, " \t\n"); i >= 0 {
		word, rest = text[:i], text[i:]
	}
	cmd, target, hasTarget := strings.Cut(word[1:], "@")
	if !validName(cmd, 1, 32) || (hasTarget && !validName(target, 1, 64)) {
		return "", "", "", false
	}
	return cmd, target, rest, true
}

// joinCommand rebuilds "/cmd rest" without the bot's name.
func joinCommand(cmd, rest string) string {
	rest = strings.TrimLeft(rest, " \t")
	if rest == "" {
		return "/" + cmd
	}
	if rest[0] == '\n' {
		return "/" + cmd + rest
	}
	return "/" + cmd + " " + rest
}

func validName(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// utf16Len counts s in UTF-16 code units, as Telegram measures text (an invalid byte counts as
// one unit, as U+FFFD would).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 && r <= utf8.MaxRune {
			n += 2
		} else {
			n++
		}
	}
	return n
}
