package telegramtest

import (
	"strings"
)

// This file builds realistic inbound updates. Each builder stores the message in its chat (so
// bots can reply to it), detects the entities Telegram would (mentions and bot commands), and
// queues the update for the bot with the next update_id. Unknown chats are created on the fly
// with a type matching the builder.

// InjectMessage is the general builder: it completes m (chat from the fake's registry, a fresh
// message_id when 0, the date, entities when nil, the replied message looked up by
// ReplyToMessage.MessageID) and queues it as a "message" update, or "channel_post" in a channel.
// An unknown chat is created from m.Chat, so give it at least ID and Type.
func (b *Bot) InjectMessage(m Message) Update {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[m.Chat.ID]
	if ch == nil {
		ch = s.addChatLocked(m.Chat)
	}
	return b.injectLocked(ch, &m)
}

func (b *Bot) injectLocked(ch *chat, m *Message) Update {
	if m.Date == 0 {
		m.Date = b.s.cfg.clock.Now().Unix()
	}
	if m.Entities == nil {
		m.Entities = detectEntities(m.Text)
	}
	if r := m.ReplyToMessage; r != nil {
		// reply_to_message is the whole replied message, as Telegram sends it (without its own
		// reply). One the fake does not know still gets the fields every Message has.
		if stored := ch.messages[r.MessageID]; stored != nil {
			m.ReplyToMessage = shallow(stored)
		} else {
			c := shallow(r)
			c.Chat = ch.Chat
			if c.Date == 0 {
				c.Date = m.Date
			}
			m.ReplyToMessage = c
		}
	}
	stored := ch.newMessageLocked(m)
	cp := *stored
	if ch.Type == Channel {
		return b.enqueueLocked(Update{ChannelPost: &cp})
	}
	return b.enqueueLocked(Update{Message: &cp})
}

// PrivateText queues a text message from a user to the bot in their private chat.
func (b *Bot) PrivateText(from User, text string) Update {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.injectLocked(b.s.privateLocked(from), &Message{From: ptr(from), Text: text})
}

// GroupText queues a message in a group or supergroup (created as a supergroup if its id starts
// with -100, else as a basic group). Whether it mentions the bot is up to text; see MentionText.
func (b *Bot) GroupText(chatID int64, from User, text string) Update {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.injectLocked(b.s.groupLocked(chatID), &Message{From: ptr(from), Text: text})
}

// MentionText queues a group message that starts with "@botname ".
func (b *Bot) MentionText(chatID int64, from User, text string) Update {
	return b.GroupText(chatID, from, "@"+b.user.Username+" "+text)
}

// Command queues "/command args" from a user: "/command@botname args" in a group (chatID is
// not from's id), plain "/command args" in the private chat (chatID == from.ID).
func (b *Bot) Command(chatID int64, from User, command, args string) Update {
	text := "/" + strings.TrimPrefix(command, "/")
	if chatID != from.ID {
		text += "@" + b.user.Username
	}
	if args != "" {
		text += " " + args
	}
	if chatID == from.ID {
		return b.PrivateText(from, text)
	}
	return b.GroupText(chatID, from, text)
}

// TopicText queues a message in forum topic thread of chatID, as Telegram sends it:
// message_thread_id, is_topic_message true, and reply_to_message set to the topic's creation
// service message (a trap for adapters that treat every reply_to_message as a real reply). The
// forum and topic are created if unknown (thread 0 creates a new topic).
func (b *Bot) TopicText(chatID, thread int64, from User, text string) Update {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.forumLocked(chatID)
	thread = s.topicLocked(ch, thread, "")
	return b.injectLocked(ch, &Message{
		From: ptr(from), Text: text, MessageThreadID: thread, IsTopicMessage: true,
		ReplyToMessage: &Message{MessageID: thread},
	})
}

// GeneralTopicReply queues a reply, in a forum's General topic, to message replyTo. Telegram
// puts the replied message's id in message_thread_id without is_topic_message: echoing that id
// back as message_thread_id fails with "message thread not found".
func (b *Bot) GeneralTopicReply(chatID int64, from User, replyTo int64, text string) Update {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.forumLocked(chatID)
	return b.injectLocked(ch, &Message{
		From: ptr(from), Text: text, MessageThreadID: replyTo, ReplyToMessage: &Message{MessageID: replyTo},
	})
}

// DMReply queues a reply in from's private chat to message replyTo, carrying the reply chain's
// message_thread_id (the root's id) without is_topic_message, as seen in the wild: echoing it
// fails with "message thread not found".
func (b *Bot) DMReply(from User, replyTo int64, text string) Update {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.privateLocked(from)
	root := replyTo
	if r := ch.messages[replyTo]; r != nil && r.MessageThreadID != 0 {
		root = r.MessageThreadID
	}
	return b.injectLocked(ch, &Message{
		From: ptr(from), Text: text, MessageThreadID: root, ReplyToMessage: &Message{MessageID: replyTo},
	})
}

// ChannelPost queues a channel post: no from, sender_chat set to the channel. The channel is
// created if unknown.
func (b *Bot) ChannelPost(chatID int64, text string) Update {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[chatID]
	if ch == nil {
		ch = s.addChatLocked(Chat{ID: chatID, Type: Channel, Title: "Channel"})
	}
	return b.injectLocked(ch, &Message{SenderChat: ptr(ch.Chat), Text: text})
}

// BotText queues a group message sent by another bot (from.IsBot is forced true).
func (b *Bot) BotText(chatID int64, from User, text string) Update {
	from.IsBot = true
	return b.GroupText(chatID, from, text)
}

// EditText queues an edited_message (edited_channel_post in a channel) for a message already
// in chatID, with its new text and an edit_date. It reports false when there is no such message.
func (b *Bot) EditText(chatID, messageID int64, text string) (Update, bool) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[chatID]
	if ch == nil || ch.messages[messageID] == nil {
		return Update{}, false
	}
	m := ch.messages[messageID]
	m.Text, m.Entities, m.EditDate = text, detectEntities(text), s.cfg.clock.Now().Unix()
	cp := *m
	if ch.Type == Channel {
		return b.enqueueLocked(Update{EditedChannelPost: &cp}), true
	}
	return b.enqueueLocked(Update{EditedMessage: &cp}), true
}

// Migration upgrades group oldID to supergroup newID (see Server.MigrateGroup) and queues the
// two service messages Telegram sends: migrate_to_chat_id in the old group, then
// migrate_from_chat_id in the new supergroup.
func (b *Bot) Migration(oldID, newID int64) (Update, Update) {
	b.s.MigrateGroup(oldID, newID)
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	old, nc := s.chats[oldID], s.chats[newID]
	u1 := b.injectLocked(old, &Message{From: ptr(Person(777000, "Telegram")), MigrateToChatID: newID})
	u2 := b.injectLocked(nc, &Message{From: ptr(Person(777000, "Telegram")), MigrateFromChatID: oldID})
	return u1, u2
}

func (s *Server) groupLocked(chatID int64) *chat {
	if c := s.chats[chatID]; c != nil {
		return c
	}
	typ := Group
	if chatID <= -1000000000000 {
		typ = Supergroup
	}
	return s.addChatLocked(Chat{ID: chatID, Type: typ, Title: "Group"})
}

func ptr[T any](v T) *T { return &v }

// detectEntities finds the entities Telegram adds to a plain text: @mentions and /commands
// (at the start or after whitespace), with UTF-16 offsets.
func detectEntities(text string) []MessageEntity {
	var out []MessageEntity
	for i := 0; i < len(text); i++ {
		c := text[i]
		if (c != '@' && c != '/') || (i > 0 && !isSpace(text[i-1])) {
			continue
		}
		j := i + 1
		for j < len(text) && isWord(text[j]) {
			j++
		}
		n := j - i - 1
		switch {
		case c == '@' && n >= 5 && n <= 32:
			out = append(out, MessageEntity{Type: "mention", Offset: utf16Len(text[:i]), Length: j - i})
		case c == '/' && n >= 1 && n <= 32:
			if j < len(text) && text[j] == '@' {
				k := j + 1
				for k < len(text) && isWord(text[k]) {
					k++
				}
				if k-j-1 >= 5 {
					j = k
				}
			}
			out = append(out, MessageEntity{Type: "bot_command", Offset: utf16Len(text[:i]), Length: j - i})
		default:
			continue
		}
		i = j - 1
	}
	return out
}

func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' }
